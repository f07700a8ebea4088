"""The body of a ``rush proxy`` worker process: the native server, built with
``ProxySettings`` in place of the app server's settings, which makes it a proxy
worker (its own loop; no router or app). The supervisor's slots start it in place of the app server's
body (worker.py) when the configuration is a `ProxyConfig`.
"""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING

from rush import logs

if TYPE_CHECKING:
    from rush.proxy_config import ProxyConfig


def run_proxy_worker(
    config: ProxyConfig, listeners: list[socket.socket], ready_fd: int | None, liveness: object = None
) -> int:
    """The body of a proxy worker process: the native server, built with
    `ProxySettings` so that it is a proxy worker; returns the exit code. (``liveness`` is the app server's
    alone: a proxy worker does not count requests for --max-requests.)"""
    from rush._rush import ProxyAccessSettings, ProxyLimitSettings, ProxySettings, ProxyTimeoutSettings
    from rush.worker import build_server, raise_open_file_limit, serve_native_loop

    logs.configure(config.log_level)
    raise_open_file_limit()
    settings = ProxySettings(
        limits=ProxyLimitSettings(
            max_connections=config.max_connections,
            max_request_line=config.max_request_line,
            max_head_size=config.max_head_size,
            max_headers=config.max_headers,
        ),
        timeouts=ProxyTimeoutSettings(
            header_timeout=config.header_timeout,
            keep_alive_timeout=config.keep_alive_timeout,
            upstream_timeout=config.upstream_timeout,
            tunnel_idle_timeout=config.tunnel_idle_timeout,
            send_timeout=config.send_timeout,
            dns_timeout=config.dns_timeout,
        ),
        access=ProxyAccessSettings(
            allow_connect_ports=list(config.allow_connect_port or []),
            allow_ports=list(config.allow_port or []),
            allow_private=config.allow_private,
            allow_clients=list(config.allow_client or []),
            auth=list(config.auth or []),
            htpasswd=config.htpasswd_lines(),
        ),
        policy_hook=config.policy,
        # Via: 1.1 HOST (rush): names this proxy, so a request that comes back to it is a loop.
        via_name=socket.gethostname(),
    )
    logs.error_logger.info("worker %d proxying", os.getpid())
    serve_native_loop(
        config,
        ready_fd,
        lambda wakeup_fd: build_server(config, listeners, settings, wakeup_fd),
    )
    return 0
