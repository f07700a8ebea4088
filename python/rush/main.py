"""`rush.run`: start a server from Python code, with the same options as the CLI."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from rush import hooks, logs, preload
from rush.config import Config, OptionError
from rush.listeners import open_listeners
from rush.loading import AppLoadError
from rush.sdnotify import Notifier
from rush.supervisor import Supervisor
from rush.worker import EXIT_BOOT_FAILURE


def serve(config: Config) -> int:
    """Binds, forks the workers and supervises them until shutdown; returns the exit code.
    Raises `rush.config.OptionError` (a ValueError) for a bad option, before binding."""
    config.validate()
    if config.chdir is not None:
        try:
            os.chdir(config.chdir)
        except OSError as error:
            raise OptionError("chdir", f"cannot be entered: {error.strerror}", config.chdir) from None
    config.check_paths()
    # Certificates are loaded once here so that a bad file stops rush before
    # it binds or forks (each worker loads them again for itself).
    config.tls_settings()
    for name in ("error_log_file", "access_log_file"):
        _check_appendable(name, getattr(config, name))
    logs.configure_from(config)
    for warning in config.sources.warnings:
        logs.error_logger.warning("%s", warning)
    if config.log_config is not None and (config.error_log_file or config.access_log_file):
        logs.error_logger.warning("--log-config is in charge of logging: --error-log-file and --access-log-file unused")
    # --env (gunicorn's raw_env): set for the app, over what the environment had, as gunicorn does.
    os.environ.update(config.environment_pairs())
    # Before the app is imported (--preload) or a worker forked: neither may talk to systemd.
    notifier = Notifier.from_environment()
    # As gunicorn's preload_app: imported before on_starting, with --env applied.
    if config.preload and not _preload(config):
        return EXIT_BOOT_FAILURE
    hooks.start(config)
    listeners = open_listeners(config)
    with _pid_file(config.pid):
        supervisor = Supervisor(config, listeners, notifier)
        hooks.ready()
        code = supervisor.run()
    hooks.exiting()
    return code


def _check_appendable(name: str, path: str | None) -> None:
    """A log file rush cannot write stops it before anything is bound, naming the option."""
    if path is None:
        return
    try:
        with open(path, "a"):
            pass
    except OSError as error:
        raise OptionError(name, f"cannot be written: {error.strerror}", path) from None


def _preload(config: Config) -> bool:
    """--preload: imports the app here, before anything is bound; False (said once) if it cannot be."""
    try:
        preload.load(config)
    except AppLoadError as error:
        details = f"\n{error.details.rstrip()}" if error.details else ""
        logs.error_logger.error("--preload: could not load the application: %s%s", error, details)
        return False
    except Exception:  # noqa: BLE001 - whatever the app's import raises is reported, then rush exits
        logs.error_logger.exception("--preload: could not load the application")
        return False
    logs.error_logger.info("--preload: %s imported in the supervisor (pid %d)", config.app, os.getpid())
    return True


@contextlib.contextmanager
def _pid_file(path: str | None) -> Any:
    """Writes the supervisor's pid to ``path`` while it runs; removes the
    file at exit if it still holds that pid (another rush may have taken it)."""
    if path is None:
        yield
        return
    pid = str(os.getpid())
    try:
        with open(path, "w") as file:
            file.write(pid + "\n")
    except OSError as error:
        raise OptionError("pid", f"cannot be written: {error.strerror}", path) from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError), open(path) as file:
            ours = file.read().strip() == pid
        if ours:
            with contextlib.suppress(OSError):
                os.unlink(path)


def run(app: Any, **options: Any) -> int:
    """Serves ``app`` (a `rush.App`, a WSGI or ASGI app, or ``"module:attribute"``)
    until SIGTERM/SIGINT.

    Options are those of `rush.Config` (``host``, ``port``, ``workers``,
    ``max_body_size``...); unset ones come from ``RUSH_*`` environment
    variables, then defaults. A bad value raises ValueError (`rush.config.OptionError`)
    naming the option's flag, before anything is bound or forked.

    More than one worker, or ``reload``, needs ``app`` as an import string
    (``rush.run("main:app", workers=4)``): each worker then imports the app
    itself. An app object was imported in this process, and forking it would
    copy into every worker whatever it started (threads, pools, open
    connections), which breaks in ways that are hard to trace. With
    ``preload=True`` the caller takes that on, as ``--preload`` does for an
    import string: the workers are forked from this process's object (after
    ``gc.freeze()``, with a warning naming any thread alive at the fork).
    ``reload`` still needs an import string.
    """
    config = Config.from_sources({"app": app, **options}, origin="keyword")
    forked_object = config.workers > 1 and not config.preload
    if not isinstance(app, str) and app is not None and (forked_object or config.reload):
        asked = f"workers={config.workers}" if config.workers > 1 else "reload=True"
        raise OptionError(
            "workers" if config.workers > 1 else "reload",
            f"needs the application as an import string: rush.run('module:attribute', {asked}) lets each worker "
            "import it; an app object imported here would be forked with its threads, pools and sockets"
            + (" (preload=True forks it on purpose)" if not config.reload else ""),
            config.workers if config.workers > 1 else True,
        )
    return serve(config)
