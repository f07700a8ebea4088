"""`rush.run`: start a server from Python code, with the same options as the CLI."""

from __future__ import annotations

from typing import Any

from rush import logs
from rush.config import Config
from rush.listeners import create_listener
from rush.supervisor import Supervisor


def serve(config: Config) -> int:
    """Binds, forks the workers and supervises them until shutdown; returns the exit code.
    Raises `rush.config.OptionError` (a ValueError) for a bad option, before binding."""
    config.validate()
    logs.configure(config.log_level, config.log_format, config.log_config)
    listener = create_listener(config)
    return Supervisor(config, listener).run()


def run(app: Any, **options: Any) -> int:
    """Serves ``app`` (a `rush.App` or ``"module:attribute"``) until SIGTERM/SIGINT.

    Options are those of `rush.Config` (``host``, ``port``, ``workers``,
    ``max_body_size``...); unset ones come from ``RUSH_*`` environment
    variables, then defaults. A bad value raises ValueError (`rush.config.OptionError`)
    naming the option's flag, before anything is bound or forked.
    """
    return serve(Config.from_sources({"app": app, **options}))
