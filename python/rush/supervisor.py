"""The supervisor: binds the listening sockets, forks workers, and keeps them running.

It owns no connections. Each worker runs its own event loop in one of
``--workers`` *slots*, and listens on its slot's socket (listeners.py): its
slot's own ``SO_REUSEPORT`` socket when rush binds TCP itself, else the one
socket every worker shares. The supervisor keeps every slot's socket open for
the slot's whole life, so a worker that dies or is replaced hands its socket,
with the connections queued in its backlog, to its successor.

The supervisor's loop only waits: signal handlers queue the signal and wake
it through a pipe, and the loop handles queued signals and dead children
one at a time:

* a worker that dies is replaced in its slot (unless it failed to load the
  app, which would only fail again: then everything stops with an error).
  One that dies early (within ``EARLY_DEATH`` seconds of its start, or before
  it was ready) is replaced only after a delay that starts at 0.1 s and
  doubles with each consecutive early death of its slot, up to 5 s; the
  delay is a deadline the loop waits for, so signals are still handled.
  After ``CRASH_LOOP_LIMIT`` early deaths in a row the server stops, exiting
  with ``EXIT_CRASH_LOOP``. A worker that lived longer resets the count;
* SIGTERM or SIGINT: the supervisor closes its listening sockets, every
  worker drains gracefully, then the supervisor exits 0 (SIGKILL for any
  worker past ``graceful_timeout``);
* SIGQUIT (or a second SIGINT): immediate stop;
* SIGHUP: workers are replaced one by one, each new one ready (on its
  predecessor's socket) before its predecessor is asked to drain, so the
  port never stops answering;
* SIGTTIN: one slot more (its socket is bound and listening before its
  worker is forked), unless that would pass `Config.max_workers` (then a
  warning, and nothing changes). SIGTTOU: the highest slot is retired: the
  supervisor closes its copy of the slot's socket first, then asks the
  slot's worker to drain, so the socket closes once that worker lets go.

Workers are forked before the supervisor creates any thread, as fork needs.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass

from rush import logs
from rush._rush import exit_with_parent
from rush.config import Config
from rush.listeners import bind_tcp, binds_tcp_itself, describe
from rush.worker import EXIT_BOOT_FAILURE, raise_open_file_limit, worker_main

HANDLED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGCHLD,
)

# How long a new worker may take to load the app before a reload gives up on it.
WORKER_READY_TIMEOUT = 60.0

# A worker that dies within this many seconds of its start (or before it was
# ready) died early: its replacement waits RESPAWN_DELAY_FIRST seconds,
# doubling with each consecutive early death of its slot up to
# RESPAWN_DELAY_MAX, and CRASH_LOOP_LIMIT early deaths in a row stop the
# server with EXIT_CRASH_LOOP.
EARLY_DEATH = 1.0
RESPAWN_DELAY_FIRST = 0.1
RESPAWN_DELAY_MAX = 5.0
CRASH_LOOP_LIMIT = 10
EXIT_CRASH_LOOP = 1


@dataclass
class Slot:
    """A place for one worker, with the socket its worker listens on."""

    index: int
    listener: socket.socket
    # The listener is this slot's own (SO_REUSEPORT), not the shared one.
    owned: bool
    # Consecutive early deaths of this slot's workers, and when the next may start.
    early_deaths: int = 0
    respawn_at: float = 0.0


@dataclass
class Worker:
    pid: int
    slot: int
    ready_reader: int
    started: float
    ready: bool = False
    # Spawned by a reload to replace a serving worker: failing to load the
    # app then aborts the reload instead of stopping the server.
    replacing: bool = False


class Supervisor:
    def __init__(self, config: Config, listener: socket.socket) -> None:
        self.config = config
        self.address = describe(listener)
        self.family = listener.family
        self.per_slot = listener.family != socket.AF_UNIX and binds_tcp_itself(config)
        self.slots: dict[int, Slot] = {0: Slot(0, listener, owned=self.per_slot)}
        self.workers: dict[int, Worker] = {}
        # Workers asked to drain (reload, fewer workers): not replaced when they exit.
        self.retiring: set[int] = set()
        self.target_workers = config.workers
        self.signal_queue: deque[int] = deque()
        self.stopping = False
        self.stop_deadline = 0.0
        self.exit_code = 0
        # One socket per slot, and a ready pipe per starting worker.
        raise_open_file_limit()
        try:
            for index in range(1, self.target_workers):
                self.open_slot(index)
        except BaseException:
            self.close_listeners()
            raise
        self.wake_reader, self.wake_writer = os.pipe()
        os.set_blocking(self.wake_reader, False)
        os.set_blocking(self.wake_writer, False)

    # Slots and their sockets.
    def open_slot(self, index: int) -> Slot:
        """A new slot; with per-slot sockets, its socket is bound and listening on return."""
        if self.per_slot:
            # The first socket's address: with --port 0, the port it picked.
            slot = Slot(index, bind_tcp(self.config, self.slots[0].listener.getsockname()), owned=True)
        else:
            slot = Slot(index, self.slots[0].listener, owned=False)
        self.slots[index] = slot
        return slot

    def retire_slot(self, index: int) -> None:
        """Closes the supervisor's copy of the slot's socket, then asks the
        slot's workers to drain: the socket closes once they let go of it."""
        slot = self.slots.pop(index, None)
        if slot is not None and slot.owned:
            slot.listener.close()
        for worker in [worker for worker in self.workers.values() if worker.slot == index]:
            self.retire(worker.pid)

    def retire(self, pid: int, signum: int = signal.SIGTERM) -> None:
        """Asks a worker to drain (or kills it); it is not replaced when it exits."""
        self.signal_worker(pid, signum)
        worker = self.workers.pop(pid, None)
        if worker is not None and worker.ready_reader >= 0:
            os.close(worker.ready_reader)
        self.retiring.add(pid)

    def close_listeners(self) -> None:
        for slot in self.slots.values():
            slot.listener.close()

    # Signals: the handler only queues; the loop acts.
    def _queue_signal(self, signum: int, frame: object) -> None:
        self.signal_queue.append(signum)
        try:
            os.write(self.wake_writer, b"!")
        except BlockingIOError:
            pass

    def run(self) -> int:
        for signum in HANDLED_SIGNALS:
            signal.signal(signum, self._queue_signal)
        logs.error_logger.info(
            "rush %s serving on %s with %d worker(s) (supervisor pid %d)",
            _version(),
            self.address,
            self.target_workers,
            os.getpid(),
        )
        while True:
            self.reap()
            while self.signal_queue:
                self.handle_signal(self.signal_queue.popleft())
            if self.stopping:
                if not self.workers:
                    break
                self.kill_workers_past_deadline()
                self.wait(0.1)
                continue
            self.maintain_worker_count()
            self.mark_ready_workers()
            self.wait(self.next_wake())
        self.cleanup()
        logs.error_logger.info("rush stopped")
        return self.exit_code

    def wait(self, timeout: float) -> None:
        try:
            readable, _, _ = select.select([self.wake_reader], [], [], timeout)
        except InterruptedError:
            return
        if readable:
            try:
                while os.read(self.wake_reader, 512):
                    pass
            except BlockingIOError:
                pass

    def next_wake(self) -> float:
        """How long the loop may wait: at most a second, less if a delayed
        respawn is due sooner."""
        timeout = 1.0
        now = time.monotonic()
        for index in self.empty_slots():
            timeout = min(timeout, self.slots[index].respawn_at - now)
        return max(timeout, 0.0)

    def empty_slots(self) -> list[int]:
        occupied = {worker.slot for worker in self.workers.values()}
        return [index for index in range(self.target_workers) if index not in occupied]

    def spawn(self, slot: Slot) -> Worker:
        ready_reader, ready_writer = os.pipe()
        supervisor_pid = os.getpid()
        pid = os.fork()
        if pid == 0:
            # A worker must not outlive its supervisor (even one killed with
            # SIGKILL): the kernel then asks it to drain and exit.
            try:
                exit_with_parent(signal.SIGTERM, supervisor_pid)
            except (OSError, RuntimeError):
                os._exit(1)
            os.close(ready_reader)
            os.close(self.wake_reader)
            os.close(self.wake_writer)
            # Only its own slot's socket stays open in the worker; nor do the
            # other workers' ready pipes leak into it.
            for other in self.slots.values():
                if other.owned and other.index != slot.index:
                    other.listener.close()
            for worker in self.workers.values():
                if worker.ready_reader >= 0:
                    os.close(worker.ready_reader)
            for signum in HANDLED_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            worker_main(self.config, slot.listener, ready_writer)
        os.close(ready_writer)
        worker = Worker(pid, slot.index, ready_reader, time.monotonic())
        self.workers[pid] = worker
        logs.error_logger.info("started worker %d", pid)
        return worker

    def mark_ready_workers(self) -> None:
        for worker in self.workers.values():
            if not worker.ready:
                self.poll_ready(worker, 0)

    def poll_ready(self, worker: Worker, timeout: float) -> bool:
        if worker.ready:
            return True
        if worker.ready_reader < 0:
            # Its pipe closed without the ready byte: the worker is exiting,
            # and reap() will see it once the kernel reports the exit.
            self.wait(timeout)
            return False
        readable, _, _ = select.select([worker.ready_reader], [], [], timeout)
        if readable:
            data = os.read(worker.ready_reader, 1)
            os.close(worker.ready_reader)
            worker.ready_reader = -1
            worker.ready = data == b"R"
            return worker.ready
        return False

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self.workers.pop(pid, None)
            if worker is None:
                self.retiring.discard(pid)
                continue
            if worker.ready_reader >= 0:
                # A worker that said it was ready before dying left the byte in its pipe.
                self.poll_ready(worker, 0)
            if worker.ready_reader >= 0:
                os.close(worker.ready_reader)
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                logs.error_logger.info("worker %d exited (%s)", pid, _describe_exit(code))
            elif worker.replacing:
                if code == EXIT_BOOT_FAILURE:
                    logs.error_logger.error(
                        "the new worker %d could not load the application; reload aborted, the old workers go on",
                        pid,
                    )
                else:
                    logs.error_logger.error(
                        "the new worker %d died (%s); reload aborted, the old workers go on", pid, _describe_exit(code)
                    )
            elif code == EXIT_BOOT_FAILURE:
                logs.error_logger.error("worker %d could not load the application; stopping", pid)
                self.exit_code = EXIT_BOOT_FAILURE
                self.begin_stop(graceful=True)
            else:
                self.schedule_respawn(worker, code)

    def schedule_respawn(self, worker: Worker, code: int) -> None:
        """Decides when the dead worker's slot gets a new one (or that the
        server stops, after too many early deaths in a row)."""
        slot = self.slots.get(worker.slot)
        if slot is None:
            return  # its slot was retired meanwhile
        now = time.monotonic()
        lived = now - worker.started
        if worker.ready and lived >= EARLY_DEATH:
            slot.early_deaths = 0
            slot.respawn_at = now
            logs.error_logger.warning("worker %d died (%s); starting a new one", worker.pid, _describe_exit(code))
            return
        slot.early_deaths += 1
        when = f"{lived:.1f} s after it started" + ("" if worker.ready else ", before it was ready")
        if slot.early_deaths >= CRASH_LOOP_LIMIT:
            logs.error_logger.error(
                "worker %d died (%s) %s: %d workers in a row died within %g s of starting; stopping",
                worker.pid,
                _describe_exit(code),
                when,
                slot.early_deaths,
                EARLY_DEATH,
            )
            self.exit_code = EXIT_CRASH_LOOP
            self.begin_stop(graceful=True)
            return
        delay = min(RESPAWN_DELAY_FIRST * 2 ** (slot.early_deaths - 1), RESPAWN_DELAY_MAX)
        slot.respawn_at = now + delay
        logs.error_logger.warning(
            "worker %d died (%s) %s; starting a new one in %.1f s", worker.pid, _describe_exit(code), when, delay
        )

    def maintain_worker_count(self) -> None:
        """Starts a worker in every empty slot whose respawn delay is over."""
        now = time.monotonic()
        for index in self.empty_slots():
            slot = self.slots[index]
            if now >= slot.respawn_at:
                self.spawn(slot)

    def handle_signal(self, signum: int) -> None:
        if signum == signal.SIGCHLD:
            return
        if signum in (signal.SIGTERM, signal.SIGINT):
            if self.stopping and signum == signal.SIGINT:
                self.begin_stop(graceful=False)
            else:
                logs.error_logger.info("received %s: shutting down gracefully", signal.Signals(signum).name)
                self.begin_stop(graceful=True)
        elif signum == signal.SIGQUIT:
            self.begin_stop(graceful=False)
        elif signum == signal.SIGHUP and not self.stopping:
            self.reload()
        elif signum == signal.SIGTTIN and not self.stopping:
            self.add_slot()
        elif signum == signal.SIGTTOU and not self.stopping and self.target_workers > 1:
            self.target_workers -= 1
            self.retire_slot(self.target_workers)

    def add_slot(self) -> None:
        limit = self.config.max_workers()
        if self.target_workers >= limit:
            hint = "" if self.config.allow_many_workers else " (--allow-many-workers raises the limit)"
            logs.error_logger.warning(
                "received SIGTTIN: ignored, %d workers is the most allowed%s", self.target_workers, hint
            )
            return
        try:
            self.open_slot(self.target_workers)
        except OSError as error:
            logs.error_logger.error("received SIGTTIN: ignored, cannot listen on another socket: %s", error)
            return
        self.target_workers += 1

    def begin_stop(self, graceful: bool) -> None:
        """Asks every worker to stop; the main loop waits for them, still
        handling signals (a second SIGINT or a SIGQUIT stops at once)."""
        if not self.stopping:
            # Let go of the listening sockets, so that they close (and the
            # port refuses new connections) as soon as the workers stop accepting.
            self.close_listeners()
        self.stopping = True
        for pid in list(self.workers) + list(self.retiring):
            self.signal_worker(pid, signal.SIGTERM if graceful else signal.SIGKILL)
        if graceful:
            self.stop_deadline = time.monotonic() + self.config.graceful_timeout + 5.0
        else:
            self.stop_deadline = time.monotonic()

    def kill_workers_past_deadline(self) -> None:
        if time.monotonic() < self.stop_deadline:
            return
        for pid in list(self.workers):
            logs.error_logger.warning("worker %d did not stop in time; killing it", pid)
            self.signal_worker(pid, signal.SIGKILL)

    def reload(self) -> None:
        """Replaces every worker, one at a time, new before old; each new
        worker takes over its predecessor's slot (and socket)."""
        logs.error_logger.info("received SIGHUP: replacing workers one by one")
        for old in list(self.workers.values()):
            if self.stopping:
                return  # reap() saw a worker fail to load the app: everything stops
            if old.pid not in self.workers or old.slot not in self.slots:
                continue  # it died meanwhile: its slot is refilled the usual way
            new_worker = self.spawn(self.slots[old.slot])
            new_worker.replacing = True
            deadline = time.monotonic() + WORKER_READY_TIMEOUT
            while not self.poll_ready(new_worker, 0.1):
                self.reap()
                if new_worker.pid not in self.workers:
                    return  # reap() logged why: the old workers go on.
                if time.monotonic() > deadline:
                    logs.error_logger.error("the new worker did not become ready in time; reload aborted")
                    self.retire(new_worker.pid, signal.SIGKILL)
                    return
            new_worker.replacing = False
            # Forget the old one now: its exit must not trigger a respawn.
            self.retire(old.pid)

    def signal_worker(self, pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    def cleanup(self) -> None:
        if self.family == socket.AF_UNIX and self.config.uds:
            try:
                os.unlink(self.config.uds)
            except OSError as error:
                if error.errno != errno.ENOENT:
                    raise
        self.close_listeners()


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _version() -> str:
    from rush._rush import __version__

    return __version__
