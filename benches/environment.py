"""The environment a measurement was made in, recorded next to every result.

Numbers mean little without the machine and software they came from, so each
results file (and the README tables) carries: the date, CPU model and count,
kernel, load average at the start (a busy machine gives noisy numbers), CPU
frequency governor, the network sysctls that matter to connection-heavy
scenarios, Python versions of both virtualenvs, tool and server versions,
and the git commit of rush that was measured.
"""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path

from benches import REPO_ROOT
from benches.rust_peers import locked_version


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_model() -> str:
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def command_output(argv: list[str], cwd: Path | None = None) -> str | None:
    """First line of what ``argv`` prints (stdout, else stderr), or None if it cannot run."""
    try:
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (completed.stdout or completed.stderr).strip()
    return text.splitlines()[0] if text else None


def wrk_version(wrk: str = "wrk") -> str | None:
    # wrk has no --version: -v prints the version line then the usage.
    line = command_output([wrk, "-v"])
    return line.split(" Copyright")[0] if line else None


def h2load_version() -> str | None:
    """``"h2load nghttp2/1.52.0"`` (the http2 group's load generator), None when not installed."""
    return command_output(["h2load", "--version"])


def h3_load_version() -> str:
    """``"h3-load (quinn 0.11.9, h3 0.0.8)"``: the http3 group's load generator, by the crate
    versions benches/rust/Cargo.lock pins."""
    lock = (REPO_ROOT / "benches" / "rust" / "Cargo.lock").read_text()
    crates = ", ".join(f"{crate} {locked_version(crate, lock) or '?'}" for crate in ("quinn", "h3", "h3-quinn"))
    return f"h3-load ({crates})"


def git_revision() -> str | None:
    revision = command_output(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT)
    if revision is None:
        return None
    dirty = command_output(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT)
    return revision + ("-dirty" if dirty else "")


def collect_environment(server_versions: dict[str, str], python_versions: dict[str, str]) -> dict:
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "kernel": f"{platform.system()} {platform.release()}",
        "load_average_at_start": os.getloadavg(),
        "cpu_governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") or "n/a",
        "sysctl": {
            name: _read(f"/proc/sys/{name.replace('.', '/')}")
            for name in ("net.core.somaxconn", "net.ipv4.tcp_tw_reuse", "net.ipv4.ip_local_port_range")
        },
        "runner_python": sys.version.split()[0],
        "python": python_versions,
        "wrk": wrk_version(),
        "h2load": h2load_version(),
        "h3_load": h3_load_version(),
        "servers": server_versions,
        "rush_git": git_revision(),
    }
