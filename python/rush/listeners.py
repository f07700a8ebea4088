"""The listening sockets: the one rush binds (or adopts) at start, and one
more per worker slot when rush binds TCP itself.

When rush binds TCP itself (``--host``/``--port``), every slot has its own
listening socket, all bound to the same address with ``SO_REUSEPORT``, so the
kernel spreads new connections evenly over the slots (by a hash of each
connection's addresses) instead of the worker that wakes first taking a batch
from one shared queue. With ``--port 0`` the first socket picks the port and
the others bind that one. Before binding, rush checks that no other process
listens on the port: ``SO_REUSEPORT`` would otherwise let a second server
started by the same user on the same port silently take half of its
connections. An inherited socket (``--fd``, systemd's ``LISTEN_FDS``) or a
Unix socket (``--uds``) cannot be multiplied that way: every worker shares
that one socket, as it is.
"""

from __future__ import annotations

import os
import socket
import stat

from rush.config import Config


def systemd_activated() -> bool:
    """Whether systemd passed this process its listening socket (as fd 3)."""
    return os.environ.get("LISTEN_PID") == str(os.getpid()) and bool(os.environ.get("LISTEN_FDS"))


def binds_tcp_itself(config: Config) -> bool:
    """True when rush binds a TCP address itself, so each worker slot gets its
    own SO_REUSEPORT socket; False for one shared socket (``--fd``, systemd
    socket activation, ``--uds``)."""
    return config.fd is None and not systemd_activated() and config.uds is None


def create_listener(config: Config) -> socket.socket:
    """Binds (or adopts) the first listening socket: the one every worker
    shares, or slot 0's when rush binds TCP itself."""
    if config.fd is not None:
        listener = socket.socket(fileno=config.fd)
    elif systemd_activated():
        # systemd socket activation: the first passed socket is fd 3.
        listener = socket.socket(fileno=3)
    elif config.uds is not None:
        try:
            if stat.S_ISSOCK(os.stat(config.uds).st_mode):
                os.unlink(config.uds)
        except FileNotFoundError:
            pass
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(config.uds)
        listener.listen(config.backlog)
        return listener
    else:
        if config.port != 0:
            check_port_unused(config)
        return bind_tcp(config, (config.host, config.port))
    listener.listen(config.backlog)
    return listener


def _tcp_family(config: Config) -> int:
    return socket.AF_INET6 if ":" in config.host else socket.AF_INET


def check_port_unused(config: Config) -> None:
    """Raises OSError (EADDRINUSE) if some socket listens on the port already.
    A probe without SO_REUSEPORT cannot bind next to a listening socket,
    while rush's own SO_REUSEPORT sockets could join another process's."""
    with socket.socket(_tcp_family(config), socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR, as the real sockets: connections left in TIME_WAIT do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((config.host, config.port))


def bind_tcp(config: Config, address: tuple[object, ...]) -> socket.socket:
    """A listening TCP socket with SO_REUSEPORT, so each slot can have one on the same address."""
    listener = socket.socket(_tcp_family(config), socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Accept only once the request's first bytes arrived: the worker can
        # serve a new connection at once instead of waiting for epoll first.
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 1)
        listener.bind(address)
        listener.listen(config.backlog)
    except BaseException:
        listener.close()
        raise
    return listener


def describe(listener: socket.socket) -> str:
    address = listener.getsockname()
    if listener.family == socket.AF_UNIX:
        return f"unix:{address}"
    host, port = address[0], address[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
