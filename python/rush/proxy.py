"""`rush proxy`: a forward HTTP proxy with CONNECT tunnels.

The proxy runs under the same supervisor as the server (workers, signals,
graceful drain, SO_REUSEPORT slots), and each worker runs the server's own
native loop, built with ``ProxySettings``: every connection it accepts is a
proxy connection. Its options are `ProxyConfig` (proxy_config.py),
a `Config` with the proxy's own fields; the ``rush proxy`` flags, the
``RUSH_*`` environment variables and `run` keywords come from it as they do
for the server. This module is the command; the worker's body is
proxy_worker.py.

Secure by default, as squid is: it listens on loopback (another address
needs ``--allow-client``, ``--auth`` or ``--auth-file``, so it never becomes
an open proxy by accident), CONNECT reaches port 443 only (``--allow-connect-port`` adds more), ``http://``
requests reach squid's ``Safe_ports`` only (``--allow-port`` adds more), targets that resolve to
loopback, private, link-local or metadata addresses are refused (403)
unless ``--allow-private``, ``--allow-client CIDR`` limits who may use it,
and ``--auth``/``--auth-file`` require ``Proxy-Authorization: Basic``.

From Python, `run` also takes ``policy``: a function
``allow(client, host, port, headers) -> bool`` called once per request or
tunnel (never per byte) after the built-in rules passed; ``client`` is an
``(ip, port)`` tuple and ``headers`` a list of ``(name, value)`` strings.
A policy that raises refuses the request (a proxy fails closed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from rush.config import ENVIRONMENT_PREFIX
from rush.proxy_config import Policy, ProxyConfig
from rush.values import OptionError, usage_error


def run(policy: Policy | None = None, **options: Any) -> int:
    """Runs the proxy until SIGTERM/SIGINT; options are `ProxyConfig`'s
    (``host``, ``port``, ``workers``, ``allow_private``...). A bad value
    raises ValueError (`rush.config.OptionError`) before anything is bound."""
    from rush.main import serve

    return serve(ProxyConfig.from_sources({"policy": policy, **options}))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rush proxy",
        description="rush proxy: a forward HTTP proxy with CONNECT tunnels, on rush's native loop.",
        epilog=f"Every option can also be set through an environment variable {ENVIRONMENT_PREFIX}<OPTION>.",
    )
    for option in ProxyConfig.option_fields():
        flag = "--" + option.name.replace("_", "-")
        help_text = f"{option.metadata['help']} (env {ENVIRONMENT_PREFIX}{option.name.upper()})"
        kind = option.metadata.get("kind")
        if kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=help_text)
        elif kind == "list":
            parser.add_argument(flag, action="append", default=None, metavar=option.metadata["metavar"], help=help_text)
        else:
            parser.add_argument(
                flag,
                default=None,
                metavar=option.metadata.get("metavar") or option.name.upper(),
                help=f"{help_text} [default: {option.default}]",
            )
    return parser


def main(argv: Sequence[str]) -> int:
    """``rush proxy [options]``; returns the exit status."""
    from rush.main import serve

    arguments = vars(build_parser().parse_args(argv))
    known = {option.name: option for option in ProxyConfig.option_fields()}
    explicit: dict[str, Any] = {}
    for name, value in arguments.items():
        if value is None:
            continue
        try:
            if isinstance(value, list):
                explicit[name] = [item for text in value for item in ProxyConfig.convert(known[name], text)]
            elif isinstance(value, str):
                explicit[name] = ProxyConfig.convert(known[name], value)
            else:
                explicit[name] = value
        except OptionError as error:
            return usage_error(str(error))
    try:
        config = ProxyConfig.from_sources(explicit)
    except (TypeError, ValueError) as error:
        return usage_error(str(error))
    try:
        return serve(config)
    except OSError as error:
        print(f"rush proxy: cannot listen: {error}", file=sys.stderr)
        return 1


__all__ = ["ProxyConfig", "main", "run"]
