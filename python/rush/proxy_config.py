"""`ProxyConfig`: the options of ``rush proxy`` (the server's `Config` with
the proxy's own fields and only the server options that mean something to
a proxy). The command is proxy.py, the worker's body proxy_worker.py; this
module is what both read, and imports neither.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from rush.config import Config, _option
from rush.values import OptionError

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
    # The workers' life, as for the server: a proxy worker's loop beats its
    # liveness page and counts its requests and tunnels (src/liveness.rs).
    "timeout",
    "max_requests",
    "max_requests_jitter",
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
