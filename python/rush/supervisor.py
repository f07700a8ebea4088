"""The supervisor: binds the listening sockets, forks workers, and keeps them running.

It owns no connections. Each worker runs its own event loop in one of
``--workers`` *slots*, and listens on its slot's sockets (listeners.py), one
per address: its slot's own ``SO_REUSEPORT`` socket for a TCP address rush
binds itself, else the one socket every worker shares. The supervisor keeps
every slot's sockets open for the slot's whole life, so a worker that dies or
is replaced hands its sockets, with the connections queued in their backlogs,
to its successor.

The supervisor is a state machine driven by one event queue. Its loop waits
(in ``poll``) for the wake-up pipe, the ready pipes of starting workers, the
``--reload`` watcher's inotify descriptor (reloader.py), or the next
deadline, then queues what happened and handles the events one at a time:

* ``SignalReceived``: the signal handlers only queue this; the C-level
  handler also writes to the wake-up pipe (``signal.set_wakeup_fd``), so a
  signal arriving just before the loop waits still wakes it;
* ``WorkerExited``: a child reaped with ``waitpid(-1, WNOHANG)``, after
  every wake-up. Its `Worker` record is marked reaped and dropped: the
  supervisor signals processes only through records not yet reaped, so it
  never signals a pid that may have been reused;
* ``WorkerReady``: a starting worker wrote its ready byte;
* timers: ``RespawnDue`` (an empty slot may get a worker), ``ReadyOverdue``
  (a reload's new worker was not ready within ``WORKER_READY_TIMEOUT``),
  ``StopOverdue`` (a worker asked to stop still runs at its own deadline,
  ``--graceful-timeout`` after its SIGTERM: it gets SIGKILL, and a log line),
  ``CheckupDue`` (read the workers' liveness pages: ``--timeout``,
  ``--max-requests``) and ``FilesChanged`` (``--reload``). Reloads, recycles,
  checkups and file changes are handled in renewal.py, a mixin of this class.

The state: the slots, each with its worker (or the time its next one may
start), every unreaped `Worker` (serving, starting, or retired and draining),
the `Reload` in progress, and whether the server is stopping. What events do:

* at start, only slot 0 gets a worker; the other slots get theirs once it is
  ready, and only then is "serving on" logged: the app was loaded (by a
  worker: loading it here first would fork whatever it starts at import into
  every worker), and a broken app fails, and says why, once. With
  ``--preload`` the app was imported here before anything was bound
  (preload.py: main.serve imports it, ``fork_worker`` freezes the
  collector's objects before each fork), and a broken one stopped rush
  before the first fork;
* a worker that dies is replaced in its slot (unless it failed to load the
  app, which would only fail again: then everything stops with exit code 3,
  or, under ``--reload``, the slot waits for the next change of a file).
  One that dies early (within ``EARLY_DEATH`` seconds of its start, or before
  it was ready) is replaced only after a delay that starts at 0.1 s and
  doubles with each consecutive early death of its slot, up to 5 s. After
  ``CRASH_LOOP_LIMIT`` early deaths in a row the server stops, exiting with
  ``EXIT_CRASH_LOOP``. A worker that lived longer resets the count. A fork
  (or its pipe) that fails is logged and retried after the same delays, with
  its own count, which never stops the server;
* SIGTERM or SIGINT: the supervisor closes its listening sockets and every
  worker (serving, starting, or already retired) drains; each gets SIGKILL at
  its own deadline; the supervisor exits 0 once all are reaped. A second
  SIGINT ("second interrupt") or SIGQUIT: SIGKILL for every worker at once;
* SIGHUP starts a reload, a state advanced by events: for the lowest slot
  whose worker predates the reload, a new worker is forked on that slot's
  socket; once it is ready it takes the slot and the old worker is retired
  (SIGTERM, SIGKILL at its deadline), then the next slot. If the new worker
  dies or is not ready in time, the reload is given up and the old workers go
  on. If the old worker dies meanwhile, the new one takes its slot at once.
  A SIGHUP during a reload starts it over: the new worker being started may
  have loaded the code the second SIGHUP replaces, so it is retired, and
  every worker started before the latest SIGHUP is replaced, including those
  the first round started;
* SIGTTIN: one slot more (its socket is bound and listening before its
  worker is forked), unless that would pass `Config.max_workers` (then a
  warning, and nothing changes). SIGTTOU: the highest slot is removed (never
  the last one: then a warning): the supervisor closes its copy of the
  slot's socket first, then retires the slot's workers, so the socket closes
  once they let go of it.

After every event the `Notifier` (sdnotify.py) tells systemd, when
``NOTIFY_SOCKET`` is set, what changed: READY once every slot's worker is
ready, RELOADING and READY around a reload, STOPPING, STATUS as workers
die and come back; its watchdog deadline is one of the loop's.

A forked worker keeps only its own slot's sockets, the write end of its own
ready pipe and its liveness page: it closes the wake-up pipe, the watcher, the other slots' sockets and the
other workers' ready pipes before anything else, with the supervisor's
signals blocked until their handlers are reset. Workers are forked before the
supervisor creates any thread, as fork needs.
"""

from __future__ import annotations

import errno
import math
import os
import select
import signal
import time
from collections import deque

from rush import hooks, logs, preload, tls
from rush._rush import share_cache_generations
from rush.config import Config
from rush.listeners import Listener, copy_for_slot, describe
from rush.metrics import MetricsEndpoint
from rush.reloader import Reloader
from rush.renewal import WORKER_READY_TIMEOUT, Renewal
from rush.sdnotify import Notifier
from rush.slots import (
    EARLY_DEATH,
    CheckupDue,
    Event,
    FilesChanged,
    Inherited,
    ReadyOverdue,
    Reload,
    RespawnDue,
    SignalReceived,
    Slot,
    StopOverdue,
    Worker,
    WorkerExited,
    WorkerReady,
    fork_worker,
    respawn_delay,
)
from rush.worker import EXIT_BOOT_FAILURE, raise_open_file_limit

HANDLED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGHUP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGCHLD,
    # A worker reached --max-requests and stopped accepting: check now.
    signal.SIGUSR2,
)

# Early deaths in a row (see slots.EARLY_DEATH) that stop the server with EXIT_CRASH_LOOP.
CRASH_LOOP_LIMIT = 10
EXIT_CRASH_LOOP = 1
# The longest the loop waits without an event: a safety net, nothing relies on it.
LONGEST_WAIT = 1.0


class Supervisor(Renewal):
    def __init__(self, config: Config, listeners: list[Listener], notifier: Notifier | None = None) -> None:
        self.config = config
        # systemd's NOTIFY_SOCKET (sdnotify.py): told after every event what changed.
        self.notifier = notifier if notifier is not None else Notifier(None)
        self.address = ", ".join(describe(listener, tls=bool(config.ssl_certfile)) for listener in listeners)
        self.slots: dict[int, Slot] = {0: Slot(0, listeners)}
        # Every forked worker not reaped yet, by pid.
        self.workers: dict[int, Worker] = {}
        self.reload: Reload | None = None
        self.generation = 0  # SIGHUPs so far
        self.events: deque[Event] = deque()
        self.stopping = False
        self.stop_signal = ""  # the signal that started the stop
        self.exit_code = 0
        # Until slot 0's first worker has loaded the app, the other slots
        # wait: a broken app fails (and says why) once, and the banner
        # "serving on" is printed only once the app loaded (see on_ready).
        self.booting = True
        self.timeout = config.effective_timeout()
        self.next_checkup: float | None = None
        if self.timeout or config.max_requests:
            self.next_checkup = time.monotonic()
        self.reloader = (
            Reloader(config.reload_dir, config.reload_include, config.reload_exclude) if config.reload else None
        )
        self.changed_files: set[str] = set()
        self.reload_due_at: float | None = None
        # Cache invalidation counters every forked worker shares (src/cache/generations.rs).
        share_cache_generations()
        # TLS session-ticket keys every worker shares, rotated from the loop (rush/tls.py).
        if config.ssl_certfile:
            tls.share_ticket_keys()
        # The workers' metrics counters (shared too) and the listener that serves them.
        self.metrics = MetricsEndpoint(config, config.max_workers()) if config.metrics else None
        # One socket per slot, and a ready pipe per starting worker.
        raise_open_file_limit()
        try:
            for index in range(1, config.workers):
                self.open_slot(index).respawn_at = math.inf  # started once slot 0's worker is ready
        except BaseException:
            self.close_listeners()
            raise
        self.wake_reader, self.wake_writer = os.pipe()
        os.set_blocking(self.wake_reader, False)
        os.set_blocking(self.wake_writer, False)

    # The loop.
    def run(self) -> int:
        previous = {signum: signal.signal(signum, self._queue_signal) for signum in HANDLED_SIGNALS}
        signal.set_wakeup_fd(self.wake_writer, warn_on_full_buffer=False)
        if self.reloader is not None:
            logs.error_logger.info("--reload: %s", self.reloader.describe())
        try:
            while not (self.stopping and not self.workers):
                self.wait_for_events()
                while self.events:
                    self.handle(self.events.popleft())
                    self.advance_reload()
                    self.notifier.update(self)
        finally:
            signal.set_wakeup_fd(-1)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.cleanup()
        logs.error_logger.info("rush stopped")
        return self.exit_code

    def _queue_signal(self, signum: int, frame: object) -> None:
        # The C-level handler has already written to the wake-up pipe.
        self.events.append(SignalReceived(signum))

    def wait_for_events(self) -> None:
        """Waits for the wake-up pipe, a ready pipe or the next deadline (not
        at all if events are queued), then queues ready notices, reaped
        children and the deadlines that passed."""
        deadline = min(self.deadlines(), default=math.inf)
        timeout = 0.0 if self.events else min(max(deadline - time.monotonic(), 0.0), LONGEST_WAIT)
        starting = {worker.ready_reader: worker for worker in self.workers.values() if worker.ready_reader >= 0}
        poller = select.poll()
        poller.register(self.wake_reader, select.POLLIN)
        if self.metrics is not None:
            poller.register(self.metrics.fileno(), select.POLLIN)
        if self.reloader is not None:
            poller.register(self.reloader.fileno(), select.POLLIN)
        for fd in starting:
            poller.register(fd, select.POLLIN)
        for fd, _ in poller.poll(math.ceil(timeout * 1000)):
            if fd == self.wake_reader:
                _drain(self.wake_reader)
            elif self.metrics is not None and fd == self.metrics.fileno():
                self.metrics.serve()
            elif self.reloader is not None and fd == self.reloader.fileno():
                self.note_file_changes()
            elif starting[fd].read_ready():
                self.events.append(WorkerReady(starting[fd]))
        self.reap()
        tls.rotate_when_due(time.monotonic())
        self.notifier.feed_watchdog(self, time.monotonic())
        self.events.extend(self.due_timers(time.monotonic()))

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
                continue  # not a worker (rush.run's caller may have children of its own)
            worker.reaped = True
            # A worker that said it was ready before dying left the byte in its pipe.
            worker.read_ready()
            worker.close_ready_pipe()
            self.events.append(WorkerExited(worker, os.waitstatus_to_exitcode(status)))

    def deadlines(self) -> list[float]:
        found = [worker.kill_at for worker in self.workers.values() if worker.kill_at is not None]
        if not self.stopping:
            found += [slot.respawn_at for slot in self.slots.values() if slot.worker is None]
        if self.reload is not None and self.reload.successor is not None:
            found.append(self.reload.ready_deadline)
        found += [due for due in (self.next_checkup, self.reload_due_at) if due is not None and not self.stopping]
        return found + self.notifier.deadlines()

    def due_timers(self, now: float) -> list[Event]:
        due: list[Event] = [
            StopOverdue(worker)
            for worker in self.workers.values()
            if worker.kill_at is not None and worker.kill_at <= now
        ]
        if not self.stopping:
            due += [RespawnDue(slot) for slot in self.slots.values() if slot.worker is None and slot.respawn_at <= now]
        if self.reload is not None and self.reload.successor is not None and self.reload.ready_deadline <= now:
            due.append(ReadyOverdue(self.reload.successor))
        if not self.stopping and self.next_checkup is not None and self.next_checkup <= now:
            due.append(CheckupDue())
        if not self.stopping and self.reload_due_at is not None and self.reload_due_at <= now:
            due.append(FilesChanged())
        return due

    def handle(self, event: Event) -> None:
        match event:
            case SignalReceived(signum):
                self.on_signal(signum)
            case WorkerExited(worker, code):
                self.on_exit(worker, code)
            case WorkerReady(worker):
                self.on_ready(worker)
            case RespawnDue(slot):
                # The slot may have been removed, or filled, since the timer was queued.
                if not self.stopping and self.slots.get(slot.index) is slot and slot.worker is None:
                    self.start_worker(slot)
            case ReadyOverdue(worker):
                if self.reload is not None and self.reload.successor is worker:
                    logs.error_logger.error(
                        "the new worker %d was not ready within %g s; reload aborted, the old workers go on",
                        worker.pid,
                        WORKER_READY_TIMEOUT,
                    )
                    self.reload = None
                    self.retire(worker, "not ready in time", kill=True)
            case CheckupDue():
                if not self.stopping:
                    self.checkup()
            case FilesChanged():
                self.on_files_changed()
            case StopOverdue(worker):
                if not worker.reaped and worker.kill_at is not None and worker.stuck:
                    worker.kill()  # its stacks were printed, and why it is killed logged
                elif not worker.reaped and worker.kill_at is not None:
                    logs.error_logger.warning(
                        "worker %d did not stop within --graceful-timeout (%g s): killing it",
                        worker.pid,
                        self.config.graceful_timeout,
                    )
                    worker.kill()

    # Signals.
    def on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if signum == signal.SIGCHLD:
            return  # the loop reaps after every wake-up
        if signum in (signal.SIGTERM, signal.SIGINT) and not self.stopping:
            logs.error_logger.info(
                "received %s: shutting down gracefully (up to --graceful-timeout, %g s; %s again stops at once)",
                name,
                self.config.graceful_timeout,
                "Ctrl-C" if signum == signal.SIGINT else "SIGINT or SIGQUIT",
            )
            self.stop_signal = name
            self.stop(graceful=True)
        elif signum == signal.SIGINT:
            draining = sum(1 for worker in self.workers.values() if not worker.killed)
            again = "Ctrl-C pressed again" if self.stop_signal == "SIGINT" else f"SIGINT after {self.stop_signal}"
            logs.error_logger.warning(
                "second interrupt (%s): stopping immediately, killing %d worker(s) without waiting for their requests",
                again,
                draining,
            )
            self.stop(graceful=False)
        elif signum == signal.SIGQUIT:
            logs.error_logger.warning("received SIGQUIT: stopping immediately")
            self.stop(graceful=False)
        elif self.stopping:
            logs.error_logger.info("received %s while stopping: ignored", name)
        elif signum == signal.SIGHUP:
            hooks.reloading()
            if preload.is_loaded():
                logs.error_logger.info(
                    "--preload: the new workers run the application imported at start; new code needs a restart"
                )
            self.begin_reload()
        elif signum == signal.SIGTTIN:
            self.add_slot()
        elif signum == signal.SIGTTOU:
            self.remove_slot()
        elif signum == signal.SIGUSR2 and self.next_checkup is not None:
            # A worker at its --max-requests: its successor starts now, not
            # at the next checkup (its slot's connections queue meanwhile).
            self.next_checkup = time.monotonic()

    def stop(self, graceful: bool) -> None:
        """Asks every worker to stop (or kills them all); the loop goes on,
        handling events, until every worker is reaped."""
        if not self.stopping:
            # Let go of the listening sockets, so that they close (and the
            # port refuses new connections) as soon as the workers stop accepting.
            self.close_listeners()
            self.stopping = True
            self.reload = None
        now = time.monotonic()
        for worker in list(self.workers.values()):
            if graceful:
                worker.terminate(now, self.config.graceful_timeout)
            else:
                worker.kill()

    # Workers: start, ready, exit, retire.
    def start_worker(self, slot: Slot) -> None:
        """Forks the slot's worker; if that fails, tries again after the respawn delay."""
        try:
            slot.worker = self.fork_worker(slot)
        except OSError as error:
            slot.spawn_failures += 1
            delay = respawn_delay(slot.spawn_failures)
            slot.respawn_at = time.monotonic() + delay
            logs.error_logger.error(
                "cannot start a worker in slot %d: %s; trying again in %.1f s", slot.index, error, delay
            )
            return
        slot.spawn_failures = 0

    def on_ready(self, worker: Worker) -> None:
        slot = self.slots.get(worker.slot)
        if self.booting and slot is not None and slot.worker is worker:
            # The app loaded: only now is the server really serving. (Loading
            # it in the supervisor first would fork whatever it starts at
            # import, its threads and sockets, into every worker.)
            self.booting = False
            logs.error_logger.info(
                "rush %s serving on %s with %d worker(s) (supervisor pid %d)",
                _version(),
                self.address,
                len(self.slots),
                os.getpid(),
            )
            now = time.monotonic()
            for other in self.slots.values():
                if other.worker is None and other.respawn_at == math.inf:
                    other.respawn_at = now
        reload = self.reload
        if reload is None or reload.successor is not worker:
            return
        reload.successor = None
        reload.replaced += 1
        slot = self.slots[worker.slot]  # removing a slot retires its successor first
        old, slot.worker = slot.worker, worker
        if old is not None and old is not worker:
            if old.liveness is not None:
                old.liveness.mark_restart()  # its WebSockets close with 1012, not 1001
            self.retire(old, f"replaced by worker {worker.pid} ({reload.cause})")

    def on_exit(self, worker: Worker, code: int) -> None:
        hooks.child_exited(worker.pid)
        how = _describe_exit(code)
        if self.metrics is not None:
            cause = "retired" if worker.retired is not None else "stopped" if self.stopping else "died"
            self.metrics.worker_exited(cause)
        slot = self.slots.get(worker.slot)
        held_slot = slot is not None and slot.worker is worker
        if held_slot:
            slot.worker = None
        if worker.retired is not None:
            logs.error_logger.info("retired worker %d exited (%s); it was retired: %s", worker.pid, how, worker.retired)
            return
        if self.stopping:
            logs.error_logger.info("worker %d exited (%s)", worker.pid, how)
            return
        if self.reload is not None and self.reload.successor is worker:
            self.reload = None
            problem = "could not load the application" if code == EXIT_BOOT_FAILURE else f"died ({how})"
            hint = "; the next change to a watched file tries again" if self.reloader is not None else ""
            logs.error_logger.error(
                "the new worker %d %s; reload aborted, the old workers go on%s", worker.pid, problem, hint
            )
            # Unless it had taken the slot of an old worker that died meanwhile, nothing else changes.
        if slot is None or not held_slot:
            return
        successor = self.reload.successor if self.reload is not None else None
        if successor is not None and successor.slot == slot.index:
            slot.worker = successor
            logs.error_logger.warning(
                "worker %d died (%s) during the reload; the new worker %d takes its slot",
                worker.pid,
                how,
                successor.pid,
            )
        elif code == EXIT_BOOT_FAILURE and self.reloader is not None:
            # --reload: the developer fixes the code; the next change starts it again.
            slot.respawn_at = math.inf
            logs.error_logger.error(
                "worker %d could not load the application; waiting for a change to a watched file", worker.pid
            )
        elif code == EXIT_BOOT_FAILURE:
            logs.error_logger.error("worker %d could not load the application; stopping", worker.pid)
            self.exit_code = EXIT_BOOT_FAILURE
            self.stop(graceful=True)
        else:
            self.schedule_respawn(slot, worker, code)

    def schedule_respawn(self, slot: Slot, worker: Worker, code: int) -> None:
        """Decides when the dead worker's slot gets a new one (or that the
        server stops, after too many early deaths in a row)."""
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
            self.stop(graceful=True)
            return
        delay = respawn_delay(slot.early_deaths)
        slot.respawn_at = now + delay
        logs.error_logger.warning(
            "worker %d died (%s) %s; starting a new one in %.1f s", worker.pid, _describe_exit(code), when, delay
        )

    def retire(self, worker: Worker, reason: str, kill: bool = False, stuck: bool = False) -> None:
        """Asks a worker to drain (SIGTERM, then SIGKILL at its deadline), or
        kills it (``kill``), or has it print its stacks and kills it
        (``stuck``); it is not replaced when it exits. A slot it was serving
        gets a new worker at once."""
        logs.error_logger.info("retiring worker %d: %s", worker.pid, reason)
        worker.retired = reason
        worker.close_ready_pipe()  # whether it gets ready no longer matters
        now = time.monotonic()
        slot = self.slots.get(worker.slot)
        if slot is not None and slot.worker is worker:
            slot.worker = None
            slot.respawn_at = now
        if self.reload is not None and self.reload.successor is worker:
            self.reload.successor = None
        if kill:
            worker.kill()
        elif stuck:
            worker.dump_then_kill(now)
        else:
            worker.terminate(now, self.config.graceful_timeout)

    # Slots (SIGTTIN, SIGTTOU).
    def open_slot(self, index: int) -> Slot:
        """A new slot; its own sockets are bound and listening on return."""
        listeners: list[Listener] = []
        try:
            for listener in self.slots[0].listeners:
                listeners.append(copy_for_slot(self.config, listener))
        except BaseException:
            for listener in listeners:
                if listener.per_slot:
                    listener.sock.close()
            raise
        slot = Slot(index, listeners)
        slot.respawn_at = time.monotonic()
        self.slots[index] = slot
        return slot

    def add_slot(self) -> None:
        limit = self.config.max_workers()
        if len(self.slots) >= limit:
            hint = "" if self.config.allow_many_workers else " (--allow-many-workers raises the limit)"
            logs.error_logger.warning(
                "received SIGTTIN: ignored, %d workers is the most allowed%s", len(self.slots), hint
            )
            return
        try:
            self.open_slot(len(self.slots))
        except OSError as error:
            logs.error_logger.error("received SIGTTIN: ignored, cannot listen on another socket: %s", error)
            return
        logs.error_logger.info("received SIGTTIN: up to %d worker(s)", len(self.slots))
        hooks.workers_changed(len(self.slots), len(self.slots) - 1)

    def remove_slot(self) -> None:
        """Closes the supervisor's copy of the highest slot's socket, then
        retires the slot's workers: the socket closes once they let go of it."""
        if len(self.slots) <= 1:
            logs.error_logger.warning("received SIGTTOU: ignored, 1 worker is the fewest")
            return
        slot = self.slots.pop(len(self.slots) - 1)
        logs.error_logger.info("received SIGTTOU: down to %d worker(s)", len(self.slots))
        hooks.workers_changed(len(self.slots), len(self.slots) + 1)
        for listener in slot.listeners:
            if listener.per_slot:
                listener.sock.close()
        for worker in list(self.workers.values()):
            if worker.slot == slot.index and worker.retired is None:
                self.retire(worker, f"slot {slot.index} removed (SIGTTOU)")

    def close_listeners(self) -> None:
        for slot in self.slots.values():
            for listener in slot.listeners:
                listener.sock.close()

    # Forking.
    def fork_worker(self, slot: Slot) -> Worker:
        """Forks a worker for the slot; raises OSError if the pipe or the fork fails."""
        inherited = Inherited(
            signals=HANDLED_SIGNALS,
            slots=self.slots.values(),
            workers=self.workers.values(),
            private_fds=(self.wake_reader, self.wake_writer)
            + ((self.metrics.fileno(),) if self.metrics is not None else ())
            + ((self.reloader.fileno(),) if self.reloader is not None else ())
            + self.notifier.fds(),
        )
        worker = fork_worker(self.config, slot, self.generation, inherited)
        self.workers[worker.pid] = worker
        logs.error_logger.info("started worker %d", worker.pid)
        return worker

    def cleanup(self) -> None:
        # Metrics stay served while workers drain, until the very end.
        if self.metrics is not None:
            self.metrics.close()
        for listener in self.slots[0].listeners:
            if listener.endpoint.kind == "unix":
                try:
                    os.unlink(listener.endpoint.path)
                except OSError as error:
                    if error.errno != errno.ENOENT:
                        raise
        self.close_listeners()
        os.close(self.wake_reader)
        os.close(self.wake_writer)
        self.notifier.close()


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _version() -> str:
    from rush._rush import __version__

    return __version__
