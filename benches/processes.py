"""Starting, watching and stopping the servers under test, through /proc.

A server may be several processes (rush's supervisor forks a worker; granian
spawns its worker), so everything is measured over the whole process tree
rooted at the PID we started:

- CPU: utime + stime of every process in the tree (fields 14 and 15 of
  /proc/<pid>/stat, all threads included), plus cutime + cstime (fields 16
  and 17: the CPU of its children that have exited and been waited for),
  read before and after the measured window; the difference divided by the
  requests served is the server's CPU time per request. The children's part
  matters for servers that fork short-lived processes (a process per
  request): those are gone before the second reading, and their CPU would
  otherwise be lost. A child alive at the first reading and reaped before the
  second moves from its own entry to its parent's, so it is counted once.
- Memory: VmRSS of every process, summed (the RSS right now), and VmHWM
  summed (each process's own peak RSS since it started); a background
  sampler also records the largest summed VmRSS it saw during the load.

Only processes we started are ever signalled: the root PID, then (if it did
not exit in time) the descendants we found under it, by PID, with SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path

CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def read_stat(pid: int) -> tuple[int, int] | None:
    """(parent PID, utime + stime + cutime + cstime in clock ticks) of ``pid``, or None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime 14, stime 15, cutime 16, cstime 17.
    return int(fields[1]), sum(int(field) for field in fields[11:15])


def parent_map() -> dict[int, int]:
    """PID -> parent PID for every process visible in /proc."""
    parents = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            stat = read_stat(int(entry.name))
            if stat is not None:
                parents[int(entry.name)] = stat[0]
    return parents


def process_tree(root: int) -> list[int]:
    """``root`` and all its living descendants (root first), or [] when root is gone."""
    parents = parent_map()
    if root not in parents:
        return []
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        tree.append(pid)
        pending.extend(children.get(pid, []))
    return tree


def process_name(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text().strip()
    except OSError:
        return "?"


def cpu_seconds(pids: Iterable[int]) -> float:
    total_ticks = 0
    for pid in pids:
        stat = read_stat(pid)
        if stat is not None:
            total_ticks += stat[1]
    return total_ticks / CLOCK_TICKS_PER_SECOND


def memory_bytes(pids: Iterable[int], field: str = "VmRSS") -> int:
    """Sum of ``field`` (VmRSS: now; VmHWM: each process's peak) over ``pids``, in bytes."""
    total_kib = 0
    for pid in pids:
        try:
            status = (PROC / str(pid) / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith(field + ":"):
                total_kib += int(line.split()[1])
                break
    return total_kib * 1024


class RssSampler:
    """Samples the summed VmRSS of a process tree in a thread, keeping the largest value seen."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root = root
        self.interval = interval
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak_bytes = max(self.peak_bytes, memory_bytes(process_tree(self.root)))
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


class ServerProcess:
    """One server we started: its root process, its log file, and how to stop it."""

    def __init__(self, argv: list[str], *, cwd: Path, env: dict[str, str], log_path: Path) -> None:
        self.argv = argv
        self.log_path = log_path
        self._log = log_path.open("wb")
        # A session of its own: a Ctrl-C in the terminal reaches the runner only, which then stops
        # the server itself (in order, with its timeout) instead of racing the terminal's SIGINT.
        self.popen = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def tree(self) -> list[int]:
        return process_tree(self.pid) if self.is_alive() else []

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.tree())

    def rss_bytes(self) -> int:
        return memory_bytes(self.tree(), "VmRSS")

    def rss_by_process(self) -> list[dict]:
        """Each process of the tree (root first) with its RSS: shows the worker apart from its supervisor."""
        return [{"pid": pid, "name": process_name(pid), "rss_bytes": memory_bytes([pid])} for pid in self.tree()]

    def peak_rss_bytes(self) -> int:
        return memory_bytes(self.tree(), "VmHWM")

    def log_tail(self, lines: int = 15) -> str:
        """The last lines the server printed (its output goes straight to the file: no flush needed)."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the root and wait up to ``timeout`` s for it to exit; then SIGKILL it, and every
        descendant seen before the stop that is still running (all processes we started: each is
        recognised by PID *and* start time, so a reused PID is never signalled). Returns the exit code."""
        descendants = [(pid, start_time(pid)) for pid in self.tree() if pid != self.pid]
        if self.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.popen.wait()
        # A worker still alive after its parent exited would keep the port and skew the next run.
        deadline = time.monotonic() + timeout
        for pid, started in descendants:
            while _still_running(pid, started) and time.monotonic() < deadline:
                time.sleep(0.05)
            if _still_running(pid, started):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                # SIGKILL is asynchronous: wait until it is dead, so its sockets are gone before the next run.
                kill_deadline = time.monotonic() + 5
                while _still_running(pid, started) and time.monotonic() < kill_deadline:
                    time.sleep(0.01)
        self._log.close()
        return self.popen.returncode


def start_time(pid: int) -> int | None:
    """When ``pid`` started (field 22 of /proc/<pid>/stat, clock ticks after boot), None if gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[19])


def _still_running(pid: int, started: int | None) -> bool:
    """Whether the process we saw as (``pid``, ``started``) still runs: same PID, same start time,
    and not a zombie (a zombie is already dead and needs no signal)."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0] != "Z" and started is not None and int(fields[19]) == started
