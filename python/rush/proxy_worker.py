"""The body of a ``rush proxy`` worker process: the native server, built with
``ProxySettings`` in place of the app server's settings, which makes it a proxy
worker (its own loop; no router or app). The supervisor's slots start it in place of the app server's
body (worker.py) when the configuration is a `ProxyConfig`.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import sys
from typing import TYPE_CHECKING

from rush import logs

if TYPE_CHECKING:
    from rush.proxy_config import ProxyConfig


def run_proxy_worker(
    config: ProxyConfig, listeners: list[socket.socket], ready_fd: int | None, liveness: object = None
) -> int:
    """The body of a proxy worker process: the native server, built with
    `ProxySettings` so that it is a proxy worker; returns the exit code. ``liveness`` is the page the
    supervisor reads (src/liveness.rs): the loop beats it (``--timeout``) and counts each request or
    tunnel its rules let through (``--max-requests``), as an app server worker does."""
    from rush._rush import ProxyAccessSettings, ProxyLimitSettings, ProxySettings, ProxyTimeoutSettings
    from rush.worker import DUMP_SIGNAL, build_server, raise_open_file_limit, serve_native_loop

    logs.configure(config.log_level)
    # A worker found stuck (--timeout) is told to print its threads' stacks before it is killed.
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
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

    def build(wakeup_fd: int) -> object:
        server = build_server(config, listeners, settings, wakeup_fd)
        if liveness is not None:
            server.set_liveness(liveness)
        return server

    serve_native_loop(config, ready_fd, build)
    return 0
