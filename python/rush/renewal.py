"""How the supervisor renews its workers while serving: reloads (SIGHUP and
``--reload``), recycles (``--max-requests``) and stuck workers
(``--timeout``). A mixin of `rush.supervisor.Supervisor`, kept apart so
that each file reads at one sitting; the state it uses is the
supervisor's (see supervisor.py for the loop and the events).

* A **reload** replaces every worker older than it, one slot at a time: a
  new worker is forked on the slot's socket, and once it is ready it takes
  the slot and the old one drains (`Reload`, advanced by `advance_reload`
  after every event). SIGHUP starts one; so does a change to a watched
  file under ``--reload`` (``FilesChanged``, queued once the files have
  been quiet for `RELOAD_QUIET` seconds, since an editor's save is often
  several writes and renames). A new worker that cannot load the app
  gives the reload up: the old workers go on serving, and under
  ``--reload`` the next change tries again.
* A **recycle** is a reload of one worker (``Reload.only``): a worker that
  began ``--max-requests`` requests (plus its jitter) is replaced as
  gracefully as by a reload, and only when no reload or recycle is in
  progress, so never two at once, and never a slot left without a
  worker. A SIGHUP during a recycle turns it into a reload of every worker.
  The worker counts its own requests (the limit is in its liveness page):
  at its limit it stops accepting at once, finishes what it has, and sends
  SIGUSR2, which brings the next checkup forward; new connections wait in
  the slot's socket for the successor, so none fails.
* A **checkup** (``CheckupDue``, every `CHECKUP_INTERVAL` seconds while
  ``--timeout`` or ``--max-requests`` is on) reads each serving worker's
  liveness page (src/liveness.rs): a heartbeat older than ``--timeout``
  means the worker's loop has not come back (a handler stuck in a blocking
  call): it is logged with the last request it began, made to print its
  threads' stacks (faulthandler, on SIGUSR1), killed half a second later,
  and replaced at once. Its request count drives recycles.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

from rush import logs
from rush.slots import Reload, Worker

if TYPE_CHECKING:
    from rush.supervisor import Supervisor

    _Base = Supervisor
else:
    _Base = object

# How long a reload's new worker may take to load the app before the reload gives up on it.
WORKER_READY_TIMEOUT = 60.0
# How often the liveness pages are read (with --timeout or --max-requests).
CHECKUP_INTERVAL = 0.5
# Changes to watched files start a reload once none came for this long.
RELOAD_QUIET = 0.2


class Renewal(_Base):
    # Reloads.
    def begin_reload(self, cause: str = "SIGHUP", changed: str = "") -> None:
        self.generation += 1
        if self.reload is not None and self.reload.only is not None:
            # A recycle in progress: its new worker loaded the code this reload
            # replaces. It is retired, and every worker is replaced instead.
            if self.reload.successor is not None:
                self.retire(self.reload.successor, f"superseded by a reload ({cause})")
            self.reload = None
        heading = "received SIGHUP" if cause == "SIGHUP" else f"{changed} changed (--reload)"
        if self.reload is None:
            logs.error_logger.info("%s: replacing workers one by one", heading)
            self.reload = Reload(self.generation, cause=cause)
            return
        logs.error_logger.info("%s during a reload: starting it over", heading)
        self.reload.generation = self.generation
        self.reload.cause = cause
        if self.reload.successor is not None:
            self.retire(self.reload.successor, f"superseded by a newer {cause}")

    def advance_reload(self) -> None:
        """Starts the next new worker of the reload in progress, if it waits
        for none; ends the reload once every slot's worker is new."""
        reload = self.reload
        if reload is None or reload.successor is not None:
            return
        stale = [
            slot
            for _, slot in sorted(self.slots.items())
            if slot.worker is not None
            and (slot.worker is reload.only if reload.only is not None else slot.worker.generation < reload.generation)
        ]
        if not stale:
            if reload.only is None:
                logs.error_logger.info("reload finished: %d worker(s) replaced", reload.replaced)
            self.reload = None
            if self.next_checkup is not None:
                # Another worker may have stopped at its --max-requests while
                # this one was replaced: its turn comes now.
                self.next_checkup = time.monotonic()
            return
        serving = [slot for slot in stale if slot.worker is not None and slot.worker.ready]
        if not serving:
            return  # the old workers left are still starting: wait until they are ready
        try:
            reload.successor = self.fork_worker(serving[0])
        except OSError as error:
            logs.error_logger.error(
                "cannot start a new worker in slot %d: %s; reload aborted, the old workers go on",
                serving[0].index,
                error,
            )
            self.reload = None
            return
        reload.ready_deadline = time.monotonic() + WORKER_READY_TIMEOUT

    # --reload.
    def note_file_changes(self) -> None:
        """Reads the watcher; changes start (or push back) the quiet period."""
        assert self.reloader is not None
        changed = self.reloader.changes()
        if not changed or self.stopping:
            return
        self.changed_files.update(changed)
        self.reload_due_at = time.monotonic() + RELOAD_QUIET

    def on_files_changed(self) -> None:
        self.reload_due_at = None
        changed = sorted(self.changed_files)
        self.changed_files.clear()
        if self.stopping or not changed:
            return
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        # Slots waiting for a change since their worker could not load the
        # app start again (while booting, slot 0 alone: it shows the error once).
        waiting = [slot for slot in self.slots.values() if slot.worker is None and slot.respawn_at == math.inf]
        if self.booting:
            waiting = [slot for slot in waiting if slot.index == 0]
        if waiting:
            logs.error_logger.info("%s changed (--reload): loading the application again", shown)
            now = time.monotonic()
            for slot in waiting:
                slot.respawn_at = now
        if any(slot.worker is not None for slot in self.slots.values()):
            self.begin_reload("--reload", shown)

    # --timeout and --max-requests.
    def checkup(self) -> None:
        """Kills the workers whose loop is stuck; starts a recycle for one that
        reached its request limit, if nothing is being replaced."""
        self.next_checkup = time.monotonic() + CHECKUP_INTERVAL
        for worker in list(self.workers.values()):
            if not worker.ready or worker.retired is not None or worker.killed or worker.liveness is None:
                continue
            age = worker.liveness.heartbeat_age()
            if self.timeout and age is not None and age > self.timeout:
                line = worker.liveness.request_line
                logs.error_logger.error(
                    "worker %d is stuck: its loop has not come back for %.1f s (--timeout %g s), "
                    "last request begun: %s; killing it (its threads' stacks follow)",
                    worker.pid,
                    age,
                    self.timeout,
                    repr(line) if line else "none",
                )
                self.retire(worker, f"stuck for {age:.1f} s (--timeout)", stuck=True)
            elif worker.request_limit and self.reload is None and worker.liveness.requests >= worker.request_limit:
                self.begin_recycle(worker)

    def begin_recycle(self, worker: Worker) -> None:
        slot = self.slots.get(worker.slot)
        if slot is None or slot.worker is not worker:
            return
        requests = worker.liveness.requests if worker.liveness is not None else 0
        logs.error_logger.info(
            "worker %d began %d requests (--max-requests %d, %d with its jitter): replacing it",
            worker.pid,
            requests,
            self.config.max_requests,
            worker.request_limit,
        )
        self.reload = Reload(self.generation, cause=f"--max-requests, after {requests} requests", only=worker)
