"""The supervisor: binds the socket, forks workers, and keeps them running.

It owns no connections. Workers inherit its listening socket (so ``--fd``,
``--uds`` and systemd socket activation work the same way as TCP) and each
runs its own event loop. The supervisor's loop only waits: signal handlers
queue the signal and wake it through a pipe, and the loop handles queued
signals and dead children one at a time:

* a worker that dies is replaced (unless it failed to load the app, which
  would only fail again: then everything stops with an error);
* SIGTERM or SIGINT: every worker drains gracefully, then the supervisor
  exits 0 (SIGKILL for any worker past ``graceful_timeout``);
* SIGQUIT (or a second SIGINT): immediate stop;
* SIGHUP: workers are replaced one by one, each new one ready before its
  predecessor is asked to drain, so the port never stops answering;
* SIGTTIN / SIGTTOU: one worker more / fewer.

Workers are forked before the supervisor creates any thread, as fork needs.
"""

from __future__ import annotations

import errno
import os
import select
import signal
import socket
import stat
import time
from collections import deque
from dataclasses import dataclass

from rush import logs
from rush._rush import exit_with_parent
from rush.config import Config
from rush.worker import EXIT_BOOT_FAILURE, worker_main

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


def create_listener(config: Config) -> socket.socket:
    """Binds (or adopts) the listening socket that every worker inherits."""
    if config.fd is not None:
        listener = socket.socket(fileno=config.fd)
    elif os.environ.get("LISTEN_PID") == str(os.getpid()) and os.environ.get("LISTEN_FDS"):
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
        family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accept only once the request's first bytes arrived: the worker can
        # serve a new connection at once instead of waiting for epoll first.
        listener.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 1)
        listener.bind((config.host, config.port))
        listener.listen(config.backlog)
        return listener
    listener.listen(config.backlog)
    return listener


def describe(listener: socket.socket) -> str:
    address = listener.getsockname()
    if listener.family == socket.AF_UNIX:
        return f"unix:{address}"
    host, port = address[0], address[1]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@dataclass
class Worker:
    pid: int
    ready_reader: int
    started: float
    ready: bool = False
    # Spawned by a reload to replace a serving worker: failing to load the
    # app then aborts the reload instead of stopping the server.
    replacing: bool = False


class Supervisor:
    def __init__(self, config: Config, listener: socket.socket) -> None:
        self.config = config
        self.listener = listener
        self.workers: dict[int, Worker] = {}
        # Workers asked to drain (reload, fewer workers): not replaced when they exit.
        self.retiring: set[int] = set()
        self.target_workers = config.workers
        self.signal_queue: deque[int] = deque()
        self.stopping = False
        self.stop_deadline = 0.0
        self.exit_code = 0
        self.wake_reader, self.wake_writer = os.pipe()
        os.set_blocking(self.wake_reader, False)
        os.set_blocking(self.wake_writer, False)

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
            describe(self.listener),
            self.target_workers,
            os.getpid(),
        )
        for _ in range(self.target_workers):
            self.spawn()
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
            self.wait(1.0)
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

    def spawn(self) -> Worker:
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
            for signum in HANDLED_SIGNALS:
                signal.signal(signum, signal.SIG_DFL)
            worker_main(self.config, self.listener, ready_writer)
        os.close(ready_writer)
        worker = Worker(pid, ready_reader, time.monotonic())
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
                os.close(worker.ready_reader)
            code = os.waitstatus_to_exitcode(status)
            if self.stopping:
                logs.error_logger.info("worker %d exited (%s)", pid, _describe_exit(code))
                continue
            if code == EXIT_BOOT_FAILURE and worker.replacing:
                logs.error_logger.error(
                    "the new worker %d could not load the application; reload aborted, the old workers go on", pid
                )
                continue
            if code == EXIT_BOOT_FAILURE:
                logs.error_logger.error("worker %d could not load the application; stopping", pid)
                self.exit_code = EXIT_BOOT_FAILURE
                self.begin_stop(graceful=True)
                continue
            logs.error_logger.warning("worker %d died (%s); starting a new one", pid, _describe_exit(code))

    def maintain_worker_count(self) -> None:
        while len(self.workers) < self.target_workers:
            self.spawn()
        excess = len(self.workers) - self.target_workers
        for pid in sorted(self.workers)[:excess] if excess > 0 else []:
            self.signal_worker(pid, signal.SIGTERM)
            self.workers.pop(pid, None)
            self.retiring.add(pid)

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
            self.target_workers += 1
        elif signum == signal.SIGTTOU and not self.stopping and self.target_workers > 1:
            self.target_workers -= 1

    def begin_stop(self, graceful: bool) -> None:
        """Asks every worker to stop; the main loop waits for them, still
        handling signals (a second SIGINT or a SIGQUIT stops at once)."""
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
        """Replaces every worker, one at a time, new before old."""
        logs.error_logger.info("received SIGHUP: replacing workers one by one")
        for old_pid in list(self.workers):
            new_worker = self.spawn()
            new_worker.replacing = True
            deadline = time.monotonic() + WORKER_READY_TIMEOUT
            while not self.poll_ready(new_worker, 0.1):
                self.reap()
                if new_worker.pid not in self.workers:
                    return  # reap() logged why: the old workers go on.
                if time.monotonic() > deadline:
                    logs.error_logger.error("the new worker did not become ready in time; reload aborted")
                    self.signal_worker(new_worker.pid, signal.SIGKILL)
                    self.workers.pop(new_worker.pid, None)
                    self.retiring.add(new_worker.pid)
                    return
            new_worker.replacing = False
            self.signal_worker(old_pid, signal.SIGTERM)
            # Forget it now: its exit must not trigger a respawn.
            self.workers.pop(old_pid, None)
            self.retiring.add(old_pid)

    def signal_worker(self, pid: int, signum: int) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    def cleanup(self) -> None:
        if self.listener.family == socket.AF_UNIX and self.config.uds:
            try:
                os.unlink(self.config.uds)
            except OSError as error:
                if error.errno != errno.ENOENT:
                    raise
        self.listener.close()


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit code {code}"


def _version() -> str:
    from rush._rush import __version__

    return __version__
