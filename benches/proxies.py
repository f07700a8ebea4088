"""Forward proxies as benchmark peers: their configs, written per run, and the origin behind them.

The ``proxy`` group (`benches.scenarios`) measures forward proxies: wrk
talks to the proxy and sends absolute-form requests (benches/lua/proxy.lua)
for a file on an origin. The origin is nginx serving the site directory
(the ``rush-v2`` app of `benches.nginx`), started by the runner before the
proxy on a port of its own and pinned to the load generator's core (the
machine has two cores; the proxy keeps one to itself, as servers do in
every other group).

Each peer proxy gets a config for one run, in the run's work directory, as
nginx does: one worker, listening on the run's host and port, no cache, no
access log, allowing loopback clients to reach any port (the benchmark's
origin is on loopback, which squid and tinyproxy would allow anyway, and
rush refuses by default: it is started with ``--allow-private``).
"""

from __future__ import annotations

import os
import pwd
from pathlib import Path


def squid_config(host: str, port: int, workdir: Path) -> str:
    """squid as a plain forward proxy: no cache, no logs but errors, one worker (``-N``). The
    ``localhost`` ACL is squid's own (127.0.0.1 and ::1)."""
    return f"""\
http_port {host}:{port}
workers 1
http_access allow localhost
http_access deny all
cache deny all
cache_mem 0 MB
access_log none
cache_store_log none
cache_log {workdir}/cache.log
pid_filename {workdir}/squid.pid
coredump_dir {workdir}
max_filedescriptors 16384
shutdown_lifetime 1 seconds
"""


def tinyproxy_config(host: str, port: int, workdir: Path) -> str:
    """tinyproxy with a client slot per wrk connection and loopback clients only."""
    return f"""\
Port {port}
Listen {host}
Timeout 600
MaxClients 2048
Allow 127.0.0.1
LogLevel Critical
PidFile "{workdir}/tinyproxy.pid"
"""


def _give_to_unprivileged_user(workdir: Path, user: str) -> None:
    """squid drops root privileges to ``user`` (Debian's "proxy") before writing its log and pid
    file; the run's work directory must then be writable by it."""
    if os.geteuid() != 0:
        return
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return
    os.chown(workdir, entry.pw_uid, entry.pw_gid)


def write_squid_config(host: str, port: int, workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "squid.conf"
    path.write_text(squid_config(host, port, workdir))
    _give_to_unprivileged_user(workdir, "proxy")
    return path


def write_tinyproxy_config(host: str, port: int, workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "tinyproxy.conf"
    path.write_text(tinyproxy_config(host, port, workdir))
    return path
