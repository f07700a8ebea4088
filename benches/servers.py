"""Who the suite measures: each server as a command line, in its fastest one-worker configuration.

A `Server` says which virtualenv it runs from (rush from rush's own ``.venv``;
every peer from the separate ``.venv-bench`` so peers never leak into rush's
environment), the pip requirements `benches.tools` installs for it, a probe
that tells whether it is usable, and the command template. Templates use
``{bin}`` (the venv's bin directory), ``{host}`` and ``{port}``; the runner
prefixes ``taskset -c <core>`` and runs them from the repository root with
it on PYTHONPATH, so ``benches.apps.*`` import.

Adding a peer is one `Server(...)` entry in `SERVERS` (and an app module in
benches/apps/ if its interface is new). Entries with ``default=False`` run
only when named with ``--servers``: variants kept for checking that a
peer's default entry really is its fastest configuration.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benches import REPO_ROOT

RUSH_VENV = REPO_ROOT / ".venv"
BENCH_VENV = REPO_ROOT / ".venv-bench"
# Written by `benches.tools`: which peers failed to install, and why.
PEER_STATUS_FILE = BENCH_VENV / "peers-status.json"


@dataclass(frozen=True)
class Server:
    name: str
    title: str
    venv: str  # "rush" or "bench"
    argv: tuple[str, ...]
    probe: str  # Python code that must run without error in the venv for the server to be usable
    version_argv: tuple[str, ...]
    requirements: tuple[str, ...] = ()
    default: bool = True
    notes: str = ""

    def venv_dir(self, rush_venv: Path = RUSH_VENV, bench_venv: Path = BENCH_VENV) -> Path:
        return rush_venv if self.venv == "rush" else bench_venv

    def command(self, *, host: str, port: int, bin_dir: Path) -> list[str]:
        return [part.format(bin=bin_dir, host=host, port=port) for part in self.argv]

    def command_template(self) -> str:
        """The command as written in the README: readable, with placeholders left in."""
        return " ".join(self.argv).replace("{bin}/", "")


SERVERS: list[Server] = [
    Server(
        name="rush",
        title="rush (native App API)",
        venv="rush",
        argv=(
            "{bin}/rush",
            "benches.apps.rush_app:app",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--workers",
            "1",
            "--log-level",
            "warning",
        ),
        probe="import rush._rush",
        version_argv=("{bin}/rush", "--version"),
        notes="a supervisor process forks one worker; CPU and RSS count both",
    ),
    Server(
        name="granian-rsgi",
        title="granian (RSGI)",
        venv="bench",
        argv=(
            "{bin}/granian",
            "--interface",
            "rsgi",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--workers",
            "1",
            "--runtime-mode",
            "st",
            "--runtime-threads",
            "1",
            "--loop",
            "uvloop",
            "--http",
            "1",
            "--no-ws",
            # Aggregates the writes of pipelined responses: granian's own answer to pipelining.
            "--http1-pipeline-flush",
            "--backlog",
            "2048",
            "--log-level",
            "warning",
            "--no-access-log",
            "benches.apps.rsgi_app:app",
        ),
        probe="import granian, uvloop",
        version_argv=("{bin}/granian", "--version"),
        requirements=("granian", "uvloop"),
        notes="single-threaded runtime on uvloop, HTTP/1 only, pipeline flush on",
    ),
    Server(
        name="granian-rsgi-plain",
        title="granian (RSGI, no experimental flags)",
        venv="bench",
        argv=(
            "{bin}/granian",
            "--interface",
            "rsgi",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--workers",
            "1",
            "--loop",
            "uvloop",
            "--http",
            "1",
            "--no-ws",
            "--log-level",
            "warning",
            "benches.apps.rsgi_app:app",
        ),
        probe="import granian, uvloop",
        version_argv=("{bin}/granian", "--version"),
        requirements=("granian", "uvloop"),
        default=False,
        notes="variant without --http1-pipeline-flush, to confirm which granian set-up is fastest",
    ),
    Server(
        name="uvicorn",
        title="uvicorn (ASGI, uvloop + httptools)",
        venv="bench",
        argv=(
            "{bin}/uvicorn",
            "benches.apps.asgi_app:app",
            "--host",
            "{host}",
            "--port",
            "{port}",
            "--workers",
            "1",
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--interface",
            "asgi3",
            "--lifespan",
            "off",
            "--backlog",
            "2048",
            "--no-access-log",
            "--log-level",
            "warning",
        ),
        probe="import uvicorn, uvloop, httptools",
        version_argv=("{bin}/uvicorn", "--version"),
        requirements=("uvicorn[standard]",),
    ),
]


def server_names(include_variants: bool = True) -> list[str]:
    return [server.name for server in SERVERS if include_variants or server.default]


def select_servers(names: list[str] | None) -> list[Server]:
    """The servers named (in registry order), or every default one. Unknown names raise ValueError."""
    if not names:
        return [server for server in SERVERS if server.default]
    known = {server.name for server in SERVERS}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown server(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return [server for server in SERVERS if server.name in names]


def peer_install_notes(status_file: Path = PEER_STATUS_FILE) -> dict[str, str]:
    """Server name -> why it is not installed, as recorded by `benches.tools` (empty when all went well)."""
    try:
        status = json.loads(status_file.read_text())
    except (OSError, ValueError):
        return {}
    return {name: entry.get("note", "") for name, entry in status.items() if not entry.get("ok", False)}


def unavailable_reason(server: Server, rush_venv: Path = RUSH_VENV, bench_venv: Path = BENCH_VENV) -> str | None:
    """Why ``server`` cannot run here (None when it can): missing venv, executable or importable module."""
    venv = server.venv_dir(rush_venv, bench_venv)
    python = venv / "bin" / "python"
    if not python.exists():
        hint = "make build" if server.venv == "rush" else "make bench-tools"
        return f"no virtualenv at {venv} (run `{hint}`)"
    executable = Path(server.argv[0].format(bin=venv / "bin"))
    if not executable.exists():
        install_note = peer_install_notes(bench_venv / PEER_STATUS_FILE.name).get(server.name)
        return install_note or f"{executable} is not installed"
    probe = subprocess.run([str(python), "-c", server.probe], capture_output=True, text=True, timeout=60, check=False)
    if probe.returncode != 0:
        last_line = (probe.stderr.strip().splitlines() or ["probe failed"])[-1]
        return f"`{server.probe}` fails in {venv}: {last_line}"
    return None


def server_version(server: Server, rush_venv: Path = RUSH_VENV, bench_venv: Path = BENCH_VENV) -> str:
    """``"<program> <version>"`` (e.g. ``"uvicorn 0.54.0"``), whatever the program's own wording."""
    bin_dir = server.venv_dir(rush_venv, bench_venv) / "bin"
    argv = [part.format(bin=bin_dir) for part in server.version_argv]
    program = Path(argv[0]).name
    try:
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{program} unknown ({error})"
    match = re.search(r"\b\d+\.\d+(?:\.\d+)?\S*", completed.stdout + completed.stderr)
    if completed.returncode != 0 or not match:
        return f"{program} unknown (`{' '.join(argv[1:])}` failed)"
    return f"{program} {match.group(0)}"
