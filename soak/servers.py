"""The rush servers under soak: starting them, signalling them, sampling
their processes' memory from /proc, and reading their logs afterwards."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak.plan import GRACEFUL_TIMEOUT, HOST, SERVER_FLAGS

REPO = Path(__file__).resolve().parent.parent
RUSH = REPO / ".venv" / "bin" / "rush"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024
READY_TIMEOUT = 60.0

PANIC_MARKERS = ("panicked at", "internal error")
_TIMESTAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def uptime() -> float:
    with open("/proc/uptime") as handle:
        return float(handle.read().split()[0])


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state is [0]), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rpartition(")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return None


def rss_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE_KB
    except (FileNotFoundError, ProcessLookupError):
        return None


def age_seconds(stat: list[str], now_uptime: float) -> float:
    # Field 22 of /proc/PID/stat (index 19 after the name): start time in clock ticks since boot.
    return now_uptime - int(stat[19]) / CLOCK_TICKS


def children_of(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for task in tasks:
        with contextlib.suppress(FileNotFoundError):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.update(int(child) for child in handle.read().split())
    return found


@dataclass
class Server:
    name: str
    app: str
    directory: Path  # logs go here
    extra_args: list[str] = field(default_factory=list)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    hups: list[float] = field(default_factory=list)  # wall-clock times of the SIGHUPs sent
    seen_workers: set[int] = field(default_factory=set)
    exit_code: int | None = None
    stop_problem: str | None = None

    @property
    def stderr_path(self) -> Path:
        return self.directory / f"{self.name}.stderr.log"

    @property
    def stdout_path(self) -> Path:
        return self.directory / f"{self.name}.stdout.log"

    def command(self) -> list[str]:
        return [str(RUSH), self.app, "--host", HOST, "--port", str(self.port), *SERVER_FLAGS, *self.extra_args]

    def start(self) -> None:
        self.port = free_port()
        env = {key: value for key, value in os.environ.items() if not key.startswith("RUSH_")}
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = str(REPO)
        with open(self.stdout_path, "wb") as stdout, open(self.stderr_path, "wb") as stderr:
            self.proc = subprocess.Popen(
                self.command(),
                cwd=REPO,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                start_new_session=True,
            )

    def wait_ready(self) -> None:
        """Polls with real requests until one is answered."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if not self.running():
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode if self.proc else None} at start")
            try:
                with socket.create_connection((HOST, self.port), timeout=1.0) as sock:
                    sock.sendall(b"GET / HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n")
                    if sock.recv(12).startswith(b"HTTP/1.1 200"):
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not answer within {READY_TIMEOUT:g}s")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def hup(self) -> None:
        if self.running():
            self.hups.append(time.time())
            self.proc.send_signal(signal.SIGHUP)  # type: ignore[union-attr]

    def sample(self) -> dict[str, Any]:
        """RSS (KiB) and age (s) of the supervisor and of each live worker."""
        now = uptime()
        sample: dict[str, Any] = {"supervisor": None, "workers": {}}
        if not self.running():
            return sample
        stat = proc_stat(self.pid)
        rss = rss_kb(self.pid)
        if stat is not None and rss is not None:
            sample["supervisor"] = {"rss_kb": rss, "age": round(age_seconds(stat, now), 1)}
        for child in sorted(children_of(self.pid)):
            stat = proc_stat(child)
            rss = rss_kb(child)
            if stat is None or rss is None or stat[0] in ("Z", "X"):
                continue
            self.seen_workers.add(child)
            sample["workers"][str(child)] = {"rss_kb": rss, "age": round(age_seconds(stat, now), 1)}
        return sample

    def stop(self) -> None:
        """SIGTERM to the supervisor (a graceful stop), then waits; SIGKILL to the
        supervisor and the workers it had if that takes too long."""
        if self.proc is None:
            return
        self.seen_workers |= children_of(self.pid)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.proc.wait(GRACEFUL_TIMEOUT + 15.0)
        except subprocess.TimeoutExpired:
            self.stop_problem = f"did not stop within {GRACEFUL_TIMEOUT + 15.0:g}s of SIGTERM: killed"
            for pid in [self.pid, *self.seen_workers]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            self.exit_code = self.proc.wait(10.0)
        time.sleep(0.5)
        leftover = [pid for pid in self.seen_workers if (stat := proc_stat(pid)) is not None and stat[0] not in "ZX"]
        if leftover:
            self.stop_problem = (self.stop_problem or "") + f" workers left running: {leftover}"
            for pid in leftover:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def log_time(line: str) -> float | None:
    match = _TIMESTAMP.match(line)
    if match is None:
        return None
    return time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")) + int(match.group(2)) / 1000


@dataclass
class LogFindings:
    generations: dict[int, int]  # worker pid -> generation (SIGHUPs received before it started)
    started_at: dict[int, float]  # worker pid -> wall-clock start (from the log)
    panics: list[str]
    deaths: list[str]
    kills: list[str]
    errors: int  # lines at ERROR level (handler tracebacks included)
    hups_received: int


def scan_log(path: Path) -> LogFindings:
    generations: dict[int, int] = {}
    started_at: dict[int, float] = {}
    panics: list[str] = []
    deaths: list[str] = []
    kills: list[str] = []
    errors = 0
    hups = 0
    text = path.read_text(errors="replace") if path.exists() else ""
    for line in text.splitlines():
        if "received SIGHUP" in line:
            hups += 1
        elif match := re.search(r"started worker (\d+)", line):
            generations[int(match.group(1))] = hups
            when = log_time(line)
            if when is not None:
                started_at[int(match.group(1))] = when
        if any(marker in line for marker in PANIC_MARKERS):
            panics.append(line.strip()[:300])
        if re.search(r"\bdied\b", line):
            deaths.append(line.strip()[:300])
        if "killing it" in line:
            kills.append(line.strip()[:300])
        if "[ERROR]" in line:
            errors += 1
    return LogFindings(generations, started_at, panics, deaths, kills, errors, hups)
