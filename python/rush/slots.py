"""What the supervisor knows about its children, and the events its loop
handles (supervisor.py has the loop and what each event does):

* a `Worker` per forked process until it is reaped, a `Slot` per place a
  worker serves in (with the slot's listening socket), and the `Reload` in
  progress, if any. A `Worker` is the only way the supervisor signals a
  process, and it sends nothing once the process was reaped: by then its pid
  may belong to another process;
* the events: `SignalReceived`, `WorkerExited`, `WorkerReady`, and the
  timers `RespawnDue`, `ReadyOverdue`, `StopOverdue`, `CheckupDue` and
  `FilesChanged`;
* `fork_worker`, which forks a worker that inherits nothing of the
  supervisor's but its slot's sockets, its own ready pipe and its own
  liveness page (a shared memory page its loop writes, see src/liveness.rs).
"""

from __future__ import annotations

import os
import random
import signal
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass

from rush import hooks, preload
from rush._rush import Liveness, exit_with_parent
from rush.config import Config
from rush.listeners import Listener
from rush.metrics import count_into_slot
from rush.proxy_config import ProxyConfig
from rush.proxy_worker import run_proxy_worker
from rush.worker import DUMP_SIGNAL, worker_main

# A worker that dies within this many seconds of its start (or before it was
# ready) died early: its replacement waits RESPAWN_DELAY_FIRST seconds,
# doubling with each consecutive early death of its slot up to
# RESPAWN_DELAY_MAX. A slot whose worker could not even be forked (fork or
# pipe failed) retries after the same delays.
EARLY_DEATH = 1.0
RESPAWN_DELAY_FIRST = 0.1
RESPAWN_DELAY_MAX = 5.0
# A stuck worker (--timeout) first gets DUMP_SIGNAL (see worker.py), and
# SIGKILL this many seconds later.
STUCK_DUMP_GRACE = 0.5


def respawn_delay(failures: int) -> float:
    """The delay before the next start of a slot after ``failures`` failures in a row."""
    return min(RESPAWN_DELAY_FIRST * 2 ** (failures - 1), RESPAWN_DELAY_MAX)


@dataclass(eq=False)
class Worker:
    """One forked worker process, from its fork until the supervisor reaps it."""

    pid: int
    slot: int
    # The read end of the pipe the worker writes b"R" to once it serves; -1 once closed.
    ready_reader: int
    started: float
    # The reload generation (how many SIGHUPs came before its start): a
    # reload replaces the workers of older generations.
    generation: int
    ready: bool = False
    reaped: bool = False
    # Why it was asked to stop for good (a reload replaced it, its slot was
    # removed...): it is not replaced when it exits. None while it serves its slot.
    retired: str | None = None
    # When it gets SIGKILL if it still runs: SIGTERM time + --graceful-timeout.
    kill_at: float | None = None
    killed: bool = False
    # Found stuck (--timeout): told to print its stack, killed at kill_at.
    stuck: bool = False
    # The page its loop writes its heartbeat and request count to (src/liveness.rs).
    liveness: Liveness | None = None
    # --max-requests plus this worker's jitter; 0: no limit.
    request_limit: int = 0

    def send(self, signum: int) -> None:
        """Signals the process, unless it was reaped already (its pid may be reused)."""
        if self.reaped:
            return
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            pass  # it exited and awaits reaping: the loop reaps it next

    def terminate(self, now: float, graceful_timeout: float) -> None:
        """SIGTERM (once), and SIGKILL due at ``now + graceful_timeout`` (or at
        an earlier deadline it already has)."""
        if self.killed or self.kill_at is not None:
            return
        self.send(signal.SIGTERM)
        self.kill_at = now + graceful_timeout

    def dump_then_kill(self, now: float) -> None:
        """Asks the worker to print its threads' stacks, and kills it
        STUCK_DUMP_GRACE seconds later (at once if it was already killed)."""
        if self.killed:
            return
        self.send(DUMP_SIGNAL)
        self.stuck = True
        self.kill_at = now + STUCK_DUMP_GRACE

    def kill(self) -> None:
        if not self.killed:
            self.send(signal.SIGKILL)
            self.killed = True
        self.kill_at = None

    def read_ready(self) -> bool | None:
        """Reads the ready pipe without waiting: True once the worker said it
        serves, False if the pipe closed without that (the worker is exiting),
        None while nothing arrived."""
        if self.ready_reader < 0:
            return self.ready
        try:
            data = os.read(self.ready_reader, 1)
        except BlockingIOError:
            return None
        self.close_ready_pipe()
        self.ready = data == b"R"
        return self.ready

    def close_ready_pipe(self) -> None:
        if self.ready_reader >= 0:
            os.close(self.ready_reader)
            self.ready_reader = -1


@dataclass(eq=False)
class Slot:
    """A place for one worker, with the sockets its worker listens on: one
    per address, the slot's own (`Listener.per_slot`) or shared by every slot."""

    index: int
    listeners: list[Listener]
    # The worker serving (or starting) in this slot; None while it has none.
    worker: Worker | None = None
    # While it has no worker: when the next one may start.
    respawn_at: float = 0.0
    # Consecutive early deaths of its workers, and consecutive failed forks.
    early_deaths: int = 0
    spawn_failures: int = 0


@dataclass(eq=False)
class Reload:
    """A reload in progress: it replaces, one slot at a time, every slot's
    worker whose generation is older than ``generation``; ``successor`` is
    the new worker starting (on its slot's socket) for slot ``successor.slot``,
    which must be ready by ``ready_deadline``."""

    generation: int
    successor: Worker | None = None
    ready_deadline: float = 0.0
    replaced: int = 0
    # Why the workers are replaced, for the log: "SIGHUP", "--reload", or a
    # worker's --max-requests.
    cause: str = "SIGHUP"
    # A recycle (--max-requests) replaces this one worker only.
    only: Worker | None = None


# The events of the supervisor's loop.
@dataclass(frozen=True)
class SignalReceived:
    """A signal the supervisor handles (queued by its handler)."""

    signum: int


@dataclass(frozen=True)
class WorkerExited:
    """A worker the loop reaped."""

    worker: Worker
    code: int  # exit status, or minus the signal that killed it


@dataclass(frozen=True)
class WorkerReady:
    """A starting worker wrote its ready byte: it serves."""

    worker: Worker


@dataclass(frozen=True)
class RespawnDue:
    """An empty slot's next worker may start now."""

    slot: Slot


@dataclass(frozen=True)
class ReadyOverdue:
    """A reload's new worker was not ready in time."""

    worker: Worker


@dataclass(frozen=True)
class StopOverdue:
    """A worker asked to stop still runs at its deadline (SIGTERM + --graceful-timeout)."""

    worker: Worker


@dataclass(frozen=True)
class CheckupDue:
    """Time to read the workers' liveness pages (--timeout, --max-requests)."""


@dataclass(frozen=True)
class FilesChanged:
    """Watched files changed (--reload) and have been quiet for a moment."""


Event = (
    SignalReceived | WorkerExited | WorkerReady | RespawnDue | ReadyOverdue | StopOverdue | CheckupDue | FilesChanged
)


@dataclass(frozen=True)
class Inherited:
    """What a forked worker finds of its supervisor and must put away before
    anything else: ``private_fds`` (the supervisor's wake-up pipe...), the
    other ``slots``' own sockets, the other ``workers``' ready pipes, and
    the handlers of the supervisor's ``signals``."""

    signals: Iterable[int]
    slots: Iterable[Slot]
    workers: Iterable[Worker]
    private_fds: Iterable[int]


def fork_worker(config: Config, slot: Slot, generation: int, inherited: Inherited) -> Worker:
    """Forks a worker for ``slot``; raises OSError if its ready pipe or the fork
    fails. The child closes, before anything else, what it must not inherit
    (see ``Inherited``). The supervisor's signals stay blocked until the
    child has reset their handlers, so none runs a supervisor handler in
    the child."""
    signals, slots, workers, private_fds = (
        inherited.signals,
        inherited.slots,
        inherited.workers,
        inherited.private_fds,
    )
    ready_reader, ready_writer = os.pipe()
    try:
        liveness = Liveness()
    except OSError:
        os.close(ready_reader)
        os.close(ready_writer)
        raise
    supervisor_pid = os.getpid()
    request_limit = 0
    if config.max_requests > 0:
        # Jitter spreads the recycling of workers started together.
        request_limit = config.max_requests + random.randint(0, config.max_requests_jitter)
    # The worker stops accepting at its limit itself and signals us (SIGUSR2).
    liveness.set_request_limit(request_limit, supervisor_pid)
    hooked = hooks.before_fork(slot.index)
    # gc.freeze() with --preload: last, so what a pre_fork hook made is frozen too.
    preload.before_fork()
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(ready_reader)
        os.close(ready_writer)
        raise
    if pid == 0:
        try:
            signal.set_wakeup_fd(-1)
            for signum in signals:
                signal.signal(signum, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(ready_reader)
            for fd in private_fds:
                os.close(fd)
            for other in slots:
                if other is not slot:
                    for listener in other.listeners:
                        if listener.per_slot:
                            listener.sock.close()
            for worker in workers:
                worker.close_ready_pipe()
            # A worker must not outlive its supervisor (even one killed with
            # SIGKILL): the kernel then asks it to drain and exit.
            exit_with_parent(signal.SIGTERM, supervisor_pid)
            count_into_slot(slot.index)
            hooks.in_worker(hooked)
            # A proxy worker: the same process model, the proxy loop instead of the server's.
            body = run_proxy_worker if isinstance(config, ProxyConfig) else None
            worker_main(config, [listener.sock for listener in slot.listeners], ready_writer, liveness, body)
        except BaseException:  # noqa: BLE001 - the child must never return into the supervisor's code
            traceback.print_exc()
        finally:
            os._exit(1)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    hooks.forked(hooked, pid)
    os.close(ready_writer)
    os.set_blocking(ready_reader, False)
    return Worker(
        pid, slot.index, ready_reader, time.monotonic(), generation, liveness=liveness, request_limit=request_limit
    )
