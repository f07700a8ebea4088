"""systemd's readiness protocol (sd_notify(3)), spoken by the supervisor.

When systemd starts rush as a ``Type=notify`` service it sets
``NOTIFY_SOCKET`` (a path, or an abstract name written ``@name``) to a
datagram socket, and waits for ``READY=1`` before it starts the units that
depend on rush. The protocol is one datagram of ``KEY=VALUE`` lines per
message, so it is written here with `socket` in a few lines rather than
with a dependency (python-systemd needs libsystemd's headers to build).

`Notifier.update` runs after every event the supervisor handles and
compares what it sees with what it last told systemd:

* ``READY=1`` (with ``STATUS=``, the worker count and addresses) once every
  slot's worker has said it serves (its ready byte, see slots.py), so that a
  dependant started on READY finds the port answering;
* ``RELOADING=1`` with ``MONOTONIC_USEC=`` (``CLOCK_MONOTONIC`` now, in µs,
  which systemd requires with it) when a reload starts, then ``READY=1``
  once it has ended (every worker replaced, or the reload given up while the
  old workers go on serving: either way rush serves again);
* ``STOPPING=1`` when the shutdown starts;
* ``STATUS=`` whenever the number of serving workers changes after that
  (a worker died, its successor serves, SIGTTIN, SIGTTOU).

With ``WATCHDOG_USEC`` set (and ``WATCHDOG_PID`` unset or the supervisor's
pid) it also sends ``WATCHDOG=1`` every half of that interval, from the
supervisor's loop (its deadline is one of the loop's), and only while at
least one worker serves and, with ``--timeout``, its loop's heartbeat
(src/liveness.rs) is younger than the timeout: a supervisor whose workers
all died or hang stops feeding the watchdog, and systemd restarts the
service.

`Notifier.from_environment` takes these variables out of the environment,
so that neither a ``--preload``-ed app nor the workers (which inherit the
environment) talk to systemd on rush's behalf.
"""

from __future__ import annotations

import os
import socket
import time
from typing import TYPE_CHECKING

from rush import logs

if TYPE_CHECKING:
    from rush.slots import Worker
    from rush.supervisor import Supervisor

_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class Notifier:
    """Tells systemd (or whatever listens on ``NOTIFY_SOCKET``) how the
    supervisor is doing; does nothing without a socket."""

    def __init__(self, address: str | None, watchdog_interval: float | None = None) -> None:
        self.sock: socket.socket | None = None
        self.address: str | bytes = ""
        if address:
            # An abstract socket's name starts with a NUL byte, which the variable writes as '@'.
            self.address = "\0" + address[1:] if address.startswith("@") else address
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self.watchdog_interval = watchdog_interval if self.sock is not None else None
        self.next_watchdog = time.monotonic() if self.watchdog_interval else None
        self.ready = False  # READY=1 sent, and no reload or stop since
        self.stopping = False
        self.generation = 0  # the supervisor's reload generation last seen
        self.status: tuple[int, int] | None = None  # (serving, slots) last sent
        self.failed = False

    @classmethod
    def from_environment(cls) -> Notifier:
        """Reads and removes ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and ``WATCHDOG_PID``."""
        address, usec, pid = (os.environ.pop(name, None) for name in _VARIABLES)
        interval = None
        if usec and usec.isdigit() and int(usec) > 0 and (not pid or pid == str(os.getpid())):
            interval = int(usec) / 2 / 1_000_000
        return cls(address, interval)

    def fds(self) -> tuple[int, ...]:
        """The descriptors a forked worker must close."""
        return (self.sock.fileno(),) if self.sock is not None else ()

    def send(self, *fields: str) -> None:
        if self.sock is None:
            return
        try:
            self.sock.sendto("\n".join(fields).encode(), self.address)
        except OSError as error:
            # systemd gone, or a wrong path: rush serves on; say it once.
            if not self.failed:
                logs.error_logger.warning("cannot notify NOTIFY_SOCKET (%s): %s", self.address.lstrip("\0"), error)
            self.failed = True

    def deadlines(self) -> list[float]:
        return [self.next_watchdog] if self.next_watchdog is not None else []

    def update(self, supervisor: Supervisor) -> None:
        """Sends what changed since the last call (see the module's docstring)."""
        if self.sock is None or self.stopping:
            return
        if supervisor.stopping:
            self.stopping = True
            self.send("STOPPING=1", "STATUS=stopping")
            return
        reloading = supervisor.reload is not None and supervisor.reload.only is None
        if reloading and supervisor.generation != self.generation:
            self.generation = supervisor.generation
            if self.ready:
                self.ready = False
                now_usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
                self.send("RELOADING=1", f"MONOTONIC_USEC={now_usec}", "STATUS=reloading: replacing the workers")
            return
        serving, slots = _serving(supervisor), len(supervisor.slots)
        status = f"STATUS={serving} of {slots} worker(s) serving on {supervisor.address}"
        if not self.ready and not reloading and serving == slots:
            self.ready = True
            self.status = (serving, slots)
            self.send("READY=1", status)
        elif self.ready and self.status != (serving, slots):
            self.status = (serving, slots)
            self.send(status)

    def feed_watchdog(self, supervisor: Supervisor, now: float) -> None:
        """``WATCHDOG=1`` when due, if a worker serves."""
        if self.next_watchdog is None or self.watchdog_interval is None or now < self.next_watchdog:
            return
        self.next_watchdog = now + self.watchdog_interval
        if any(_alive(worker, supervisor.timeout) for worker in supervisor.workers.values()):
            self.send("WATCHDOG=1")

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _alive(worker: Worker, timeout: float) -> bool:
    """Serving, and (with --timeout) its loop came back within the timeout."""
    if not worker.ready or worker.killed or worker.reaped:
        return False
    age = worker.liveness.heartbeat_age() if timeout and worker.liveness is not None else None
    return age is None or age <= timeout


def _serving(supervisor: Supervisor) -> int:
    """Slots whose worker has said it serves."""
    return sum(1 for slot in supervisor.slots.values() if slot.worker is not None and slot.worker.ready)
