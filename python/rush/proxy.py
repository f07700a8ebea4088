"""`rush proxy`: a forward HTTP proxy with CONNECT tunnels.

The proxy runs under the same supervisor as the server (workers, signals,
graceful drain, SO_REUSEPORT slots), and each worker runs the server's own
native loop, built with ``ProxySettings``: every connection it accepts is a
proxy connection. Its options are `ProxyConfig`,
a `Config` with the proxy's own fields; the ``rush proxy`` flags, the
``RUSH_*`` environment variables and `run` keywords come from it as they do
for the server.

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
import ipaddress
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

from rush import logs
from rush.config import ENVIRONMENT_PREFIX, Config, OptionError, _option

Policy = Callable[[tuple[str, int], str, int, list[tuple[str, str]]], bool]

# The server's options that mean something to the proxy; the others (app,
# static files, WSGI/ASGI...) are not flags of ``rush proxy``.
_SHARED_OPTIONS = (
    "host",
    "port",
    "fd",
    "bind",
    "workers",
    "allow_many_workers",
    "backlog",
    "keep_alive_timeout",
    "header_timeout",
    "send_timeout",
    "graceful_timeout",
    "max_connections",
    "max_request_line",
    "max_head_size",
    "max_headers",
    "access_log",
    "log_level",
)


@dataclass
class ProxyConfig(Config):
    """Options of ``rush proxy``: the server's process and limit options plus the proxy's own."""

    port: int = _option(8888, "TCP port to bind")
    access_log: bool = _option(True, "log one line per request or tunnel to stdout", kind="bool")
    upstream_timeout: float = _option(
        60.0, "seconds to wait for an origin to accept a connection or send response bytes (504 beyond)"
    )
    tunnel_idle_timeout: float = _option(300.0, "seconds a CONNECT tunnel may stay silent both ways")
    dns_timeout: float = _option(10.0, "seconds a name lookup may take (504 beyond)")
    allow_connect_port: list[int] = _option(
        None, "also allow CONNECT to this port (443 always is; repeatable)", kind="list", metavar="PORT"
    )
    allow_port: list[int] = _option(
        None,
        "also allow http:// requests to this port (squid's Safe_ports always are: 80, 21, 443, 70, 210, "
        "280, 488, 591, 777, 1025-65535; repeatable)",
        kind="list",
        metavar="PORT",
    )
    allow_private: bool = _option(
        False, "allow targets on loopback, private, link-local and metadata addresses", kind="bool"
    )
    allow_client: list[str] = _option(
        None, "only clients in this network may use the proxy (repeatable)", kind="list", metavar="CIDR"
    )
    auth: list[str] = _option(
        None, "require Proxy-Authorization Basic with these credentials (repeatable)", kind="list", metavar="USER:PASS"
    )
    auth_file: str | None = _option(
        None, "require Proxy-Authorization Basic against an htpasswd file (bcrypt or {SHA})", metavar="PATH"
    )
    policy: Any = _option(None, "Python only: allow(client, host, port, headers) -> bool", kind="python")

    @classmethod
    def option_fields(cls) -> list[Any]:
        own = {option.name for option in fields(ProxyConfig)} - {option.name for option in fields(Config)}
        return [
            option
            for option in fields(cls)
            if (option.name in _SHARED_OPTIONS or option.name in own) and option.metadata.get("kind") != "python"
        ]

    @staticmethod
    def convert(option: Any, text: str) -> Any:
        if option.metadata.get("kind") == "list":
            items = [item.strip() for item in text.split(",") if item.strip()]
            if option.name in ("allow_connect_port", "allow_port"):
                try:
                    return [int(item) for item in items]
                except ValueError:
                    raise OptionError(option.name, "must be port numbers", text) from None
            return items
        return Config.convert(option, text)

    def validate(self) -> None:
        super().validate()
        if self.uds is not None:
            raise OptionError("uds", "is not supported by the proxy (it listens on TCP)", self.uds)
        for text in self.bind or []:
            if text.strip().startswith("unix:"):
                raise OptionError("bind", "takes TCP addresses only for the proxy (it listens on TCP)", text)
        for name in ("upstream_timeout", "tunnel_idle_timeout", "dns_timeout"):
            self._check_seconds(name, zero_allowed=False)
        for name in ("allow_connect_port", "allow_port"):
            for port in getattr(self, name) or []:
                if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
                    raise OptionError(name, "must be a port between 1 and 65535", port)
        for network in self.allow_client or []:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise OptionError("allow_client", "must be an address or a CIDR such as 10.0.0.0/8", network) from None
        for credential in self.auth or []:
            if not isinstance(credential, str) or ":" not in credential or credential.startswith(":"):
                raise OptionError("auth", "takes USER:PASSWORD", "<hidden>")
        if self.auth_file is not None and not os.access(self.auth_file, os.R_OK):
            raise OptionError("auth_file", "must be a readable htpasswd file", self.auth_file)
        open_host = self._open_proxy_host()
        if open_host is not None:
            raise OptionError(
                "bind" if self.bind else "host",
                "would make an open proxy: with a non-loopback address, say who may use it with "
                "--allow-client CIDR (0.0.0.0/0 and ::/0 for everyone), --auth or --auth-file",
                open_host,
            )
        if self.policy is not None and not callable(self.policy):
            raise OptionError("policy", "must be a function allow(client, host, port, headers) -> bool", self.policy)

    def _open_proxy_host(self) -> str | None:
        """The address listened on beyond loopback with no client rule and no credentials,
        if any: anyone who can reach the port could relay through it (the accident the
        secure defaults exist for). Inherited sockets (--fd, fd://N, systemd) are the
        caller's choice."""
        if self.allow_client or self.auth or self.auth_file or self.policy is not None or self.fd is not None:
            return None
        from rush.listeners import parse_bind

        if self.bind:
            hosts = [endpoint.host for endpoint in map(parse_bind, self.bind) if endpoint.kind == "tcp"]
        else:
            hosts = [self.host]
        return next((host for host in hosts if not _is_loopback(host)), None)

    def htpasswd_lines(self) -> list[str]:
        if self.auth_file is None:
            return []
        with open(self.auth_file, encoding="utf-8") as file:
            return [line.strip() for line in file if line.strip() and not line.lstrip().startswith("#")]


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # A name: loopback only if it is localhost.
        return host.lower() == "localhost"


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
    from rush.cli import usage_error
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


def run_proxy_worker(config: ProxyConfig, listeners: list[socket.socket], ready_fd: int | None) -> int:
    """The body of a proxy worker process: the server's native loop, built
    with `ProxySettings` so that every connection it accepts is a proxy
    connection; returns the exit code."""
    from rush._rush import ProxySettings
    from rush.app import App
    from rush.worker import build_server, raise_open_file_limit, serve_native_loop

    logs.configure(config.log_level)
    raise_open_file_limit()
    settings = ProxySettings(
        policy_hook=config.policy,
        max_connections=config.max_connections,
        max_request_line=config.max_request_line,
        max_head_size=config.max_head_size,
        max_headers=config.max_headers,
        header_timeout=config.header_timeout,
        keep_alive_timeout=config.keep_alive_timeout,
        upstream_timeout=config.upstream_timeout,
        tunnel_idle_timeout=config.tunnel_idle_timeout,
        send_timeout=config.send_timeout,
        dns_timeout=config.dns_timeout,
        allow_connect_ports=list(config.allow_connect_port or []),
        allow_ports=list(config.allow_port or []),
        allow_private=config.allow_private,
        allow_clients=list(config.allow_client or []),
        auth=list(config.auth or []),
        htpasswd=config.htpasswd_lines(),
        # Via: 1.1 HOST (rush): names this proxy, so a request that comes back to it is a loop.
        via_name=socket.gethostname(),
    )
    logs.error_logger.info("worker %d proxying", os.getpid())
    serve_native_loop(
        config,
        ready_fd,
        lambda wakeup_fd: build_server(config, listeners, App().build_router(), wakeup_fd, proxy=settings),
    )
    return 0


__all__ = ["ProxyConfig", "main", "run"]
