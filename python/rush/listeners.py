"""The listening sockets: the addresses rush listens on (one per ``--bind``,
or ``--host``/``--port``, ``--uds``, ``--fd``, or the sockets systemd passed),
bound or adopted once at start, and the copies each worker slot gets.

`endpoints` says what to listen on, `open_listeners` binds or adopts slot 0's
sockets, and `copy_for_slot` gives another slot its own. Every worker
accepts on all of its slot's sockets (the native loop registers each one).

When rush binds a TCP address itself, every slot has its own listening
socket for it, all bound to that address with ``SO_REUSEPORT``, so the
kernel spreads new connections evenly over the slots (by a hash of each
connection's addresses) instead of the worker that wakes first taking a
batch from one shared queue. With port 0 the first socket picks the port and
the others bind that one. Before binding, rush checks that no other process
listens on the port: ``SO_REUSEPORT`` would otherwise let a second server
started by the same user on the same port silently take half of its
connections. An inherited socket (``fd://N``, systemd's ``LISTEN_FDS``) or a
Unix socket (``unix:PATH``) cannot be multiplied that way: every worker
shares that one socket, as it is.

systemd socket activation (``sd_listen_fds(3)``): when ``LISTEN_PID`` is this
process, its ``LISTEN_FDS`` sockets, from fd 3 on, are the listeners, in
place of any address option; ``LISTEN_FDNAMES`` names them in the log. The
variables are removed once read, so nothing the app starts takes them for
its own. The supervisor holds these sockets for its whole life, so HUP
reloads and replaced workers go on accepting from them.
"""

from __future__ import annotations

import os
import re
import socket
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rush import logs
from rush.values import OptionError

if TYPE_CHECKING:
    from rush.config import Config

# sd_listen_fds(3): the first passed socket.
SD_LISTEN_FDS_START = 3

BIND_FORMS = "HOST:PORT, [IPV6]:PORT, unix:PATH or fd://N"


@dataclass(frozen=True)
class Endpoint:
    """One address to listen on: ``kind`` is "tcp" (host, port), "unix"
    (path) or "fd" (an inherited socket, fd; ``name`` is systemd's name for it)."""

    kind: str
    host: str = ""
    port: int = 0
    path: str = ""
    fd: int = -1
    name: str = ""


@dataclass(eq=False)
class Listener:
    """A listening socket and the endpoint it serves. ``per_slot``: rush
    bound this TCP address itself, so each slot gets its own copy."""

    sock: socket.socket
    endpoint: Endpoint
    per_slot: bool


def parse_bind(text: str) -> Endpoint:
    """``--bind`` as gunicorn reads it: ``HOST``, ``HOST:PORT``,
    ``[IPV6]:PORT``, ``unix:PATH`` or ``fd://N``; raises OptionError."""
    if not isinstance(text, str) or not text.strip():
        raise OptionError("bind", f"takes {BIND_FORMS}", text)
    stripped = text.strip()
    if stripped.startswith("unix:"):
        if not stripped[5:]:
            raise OptionError("bind", f"takes {BIND_FORMS}", text)
        return Endpoint("unix", path=stripped[5:])
    if stripped.startswith("fd://"):
        if not stripped[5:].isdigit():
            raise OptionError("bind", f"takes {BIND_FORMS}", text)
        return Endpoint("fd", fd=int(stripped[5:]))
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\](?::(\d+))?|([^:\s\[\]]+)(?::(\d+))?", stripped)
    if match is None:
        raise OptionError("bind", f"takes {BIND_FORMS}", text)
    port = int(match.group(2) or match.group(4) or 8000)
    if port > 65535:
        raise OptionError("bind", "names a port above 65535", text)
    return Endpoint("tcp", host=match.group(1) or match.group(3), port=port)


def systemd_activated() -> bool:
    """Whether systemd passed this process listening sockets (from fd 3 on)."""
    return os.environ.get("LISTEN_PID") == str(os.getpid()) and bool(os.environ.get("LISTEN_FDS"))


def systemd_endpoints() -> list[Endpoint]:
    """The sockets systemd passed, named by ``LISTEN_FDNAMES`` when it is set."""
    try:
        count = int(os.environ.get("LISTEN_FDS", ""))
    except ValueError:
        raise OptionError(
            "fd", "cannot be taken from LISTEN_FDS, which is not a number", os.environ["LISTEN_FDS"]
        ) from None
    names = os.environ.get("LISTEN_FDNAMES", "").split(":")
    return [
        Endpoint("fd", fd=SD_LISTEN_FDS_START + index, name=names[index] if index < len(names) else "")
        for index in range(count)
    ]


def endpoints(config: Config) -> list[Endpoint]:
    """What to listen on, in order: the sockets systemd passed, else every
    ``--bind``, else ``--fd``, ``--uds`` or ``--host``/``--port``."""
    if systemd_activated():
        return systemd_endpoints()
    if config.bind:
        return [parse_bind(text) for text in config.bind]
    if config.fd is not None:
        return [Endpoint("fd", fd=config.fd)]
    if config.uds is not None:
        return [Endpoint("unix", path=config.uds)]
    return [Endpoint("tcp", host=config.host, port=config.port)]


def open_listeners(config: Config) -> list[Listener]:
    """Binds (or adopts) slot 0's listening socket for every endpoint; on
    failure closes those already open and raises OSError."""
    found = endpoints(config)
    if systemd_activated():
        for variable in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
            os.environ.pop(variable, None)
        if config.bind or config.uds is not None or config.fd is not None:
            logs.error_logger.warning(
                "serving the %d socket(s) systemd passed (LISTEN_FDS): --bind, --uds and --fd are ignored", len(found)
            )
    opened: list[Listener] = []
    try:
        for endpoint in found:
            try:
                opened.append(_open(config, endpoint))
            except OSError as error:
                # "Address already in use" alone does not say which of several binds failed.
                raise OSError(error.errno, f"{error.strerror or error} ({_where(endpoint)})") from None
    except BaseException:
        for listener in opened:
            listener.sock.close()
        raise
    return opened


def _where(endpoint: Endpoint) -> str:
    """The endpoint as a bind names it: ``HOST:PORT``, ``[V6]:PORT``, ``unix:PATH`` or ``fd N``."""
    if endpoint.kind == "unix":
        return f"unix:{endpoint.path}"
    if endpoint.kind == "fd":
        return f"fd {endpoint.fd}"
    host = f"[{endpoint.host}]" if ":" in str(endpoint.host) else endpoint.host
    return f"{host}:{endpoint.port}"


def _open(config: Config, endpoint: Endpoint) -> Listener:
    if endpoint.kind == "fd":
        sock = socket.socket(fileno=endpoint.fd)
        sock.listen(config.backlog)
        return Listener(sock, endpoint, per_slot=False)
    if endpoint.kind == "unix":
        try:
            if stat.S_ISSOCK(os.stat(endpoint.path).st_mode):
                os.unlink(endpoint.path)
        except FileNotFoundError:
            pass
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(endpoint.path)
            sock.listen(config.backlog)
        except BaseException:
            sock.close()
            raise
        return Listener(sock, endpoint, per_slot=False)
    if endpoint.port != 0:
        check_port_unused(endpoint.host, endpoint.port)
    sock = bind_tcp(config, (endpoint.host, endpoint.port))
    if config.http3:
        # Each worker binds its own UDP socket beside the TCP one (src/http3/): a port taken
        # for UDP must stop the start here, not fail every worker.
        try:
            check_udp_port_unused(endpoint.host, sock.getsockname()[1])
        except OSError as error:
            sock.close()
            raise OSError(error.errno, f"--http3: UDP port taken: {error.strerror or error}") from None
    return Listener(sock, endpoint, per_slot=True)


def copy_for_slot(config: Config, listener: Listener) -> Listener:
    """Another slot's socket for ``listener``'s endpoint: its own, bound to the
    same address (with port 0, the port the first one picked), or the same
    shared socket."""
    if not listener.per_slot:
        return listener
    return Listener(bind_tcp(config, listener.sock.getsockname()), listener.endpoint, per_slot=True)


def _tcp_family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def check_port_unused(host: str, port: int) -> None:
    """Raises OSError (EADDRINUSE) if some socket listens on the port already.
    A probe without SO_REUSEPORT cannot bind next to a listening socket,
    while rush's own SO_REUSEPORT sockets could join another process's."""
    with socket.socket(_tcp_family(host), socket.SOCK_STREAM) as probe:
        # SO_REUSEADDR, as the real sockets: connections left in TIME_WAIT do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def check_udp_port_unused(host: str, port: int) -> None:
    """Raises OSError (EADDRINUSE) if some UDP socket is bound to the port already (the probe
    has no SO_REUSEPORT, as `check_port_unused`'s, so it cannot join another process's)."""
    with socket.socket(_tcp_family(host), socket.SOCK_DGRAM) as probe:
        probe.bind((host, port))


def bind_tcp(config: Config, address: tuple[object, ...]) -> socket.socket:
    """A listening TCP socket with SO_REUSEPORT, so each slot can have one on the same address."""
    listener = socket.socket(_tcp_family(str(address[0])), socket.SOCK_STREAM)
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


def describe(listener: Listener, tls: bool = False) -> str:
    """The address as the log shows it: ``http://HOST:PORT`` or ``unix:PATH``,
    with systemd's name for a socket it passed."""
    sock = listener.sock
    address = sock.getsockname()
    if sock.family == socket.AF_UNIX:
        text = f"unix:{address}"
    else:
        host, port = address[0], address[1]
        scheme = "https" if tls else "http"
        text = f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
    if listener.endpoint.name:
        text += f" (systemd socket {listener.endpoint.name})"
    return text
