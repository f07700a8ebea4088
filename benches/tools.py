"""Installs what the benchmarks need, on a fresh machine: ``python -m benches.tools`` (``make bench-tools``).

- wrk, h2load (Debian's nghttp2-client: the http2 group's load generator), and the
  Debian packages peers need (nginx; libev-dev, which bjoern builds against), with
  ``apt-get`` when they are missing;
- ``.venv-bench``, a virtualenv of its own for the peer servers and matplotlib, so
  none of them ever leaks into rush's ``.venv`` (rush runs from there, built by
  ``make build``);
- each peer's pip requirements (from `benches.servers`), one peer at a time: a peer
  that fails to install is recorded in ``.venv-bench/peers-status.json`` with the
  reason and later skipped with that note, it never stops the others (the same
  file records a system package that failed to install);
- the Rust peers (actix-web, hyper hello worlds in benches/rust/), built with
  ``cargo build --release --locked`` at low priority (skipped with a note when
  there is no cargo or with ``--no-rust``; cargo makes a second build a no-op);
- with ``--oha``, the oha load generator from crates.io into benches/.tools/.

A stamp file remembers the requirement sets already installed, so a second
``make bench`` goes straight to measuring. ``--force`` reinstalls.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from benches import BENCHES_DIR, rust_peers
from benches.servers import BENCH_VENV, PEER_STATUS_FILE, SERVERS

CHART_REQUIREMENTS = ("matplotlib",)
TOOLS_DIR = BENCHES_DIR / ".tools"
STAMP_FILE = BENCH_VENV / "requirements.stamp"


def say(message: str) -> None:
    print(f"bench-tools: {message}", flush=True)


def deb_installed(package: str) -> bool:
    completed = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True, check=False
    )
    return completed.returncode == 0 and completed.stdout.endswith("installed")


def apt_install(packages: list[str]) -> tuple[bool, str]:
    """Installs the Debian packages not yet installed; returns (success, why not)."""
    missing = [package for package in packages if not deb_installed(package)]
    if not missing:
        return True, ""
    if shutil.which("apt-get") is None:
        return False, f"{' '.join(missing)} missing and there is no apt-get: install them with your package manager"
    say(f"installing {' '.join(missing)} with apt-get")
    # noninteractive: no debconf questions; a package's service (nginx's) is never needed, only its program.
    environment = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *missing]):
        completed = subprocess.run(argv, capture_output=True, text=True, check=False, env=environment)
        if completed.returncode != 0:
            last = (completed.stderr or completed.stdout).strip().splitlines()[-1:] or ["?"]
            return False, f"`{' '.join(argv)}` failed (not root? try sudo): {last[0]}"[:300]
    return True, ""


def ensure_wrk() -> bool:
    if shutil.which("wrk"):
        return True
    ok, note = apt_install(["wrk"])
    if not ok:
        say(note)
    return shutil.which("wrk") is not None


def ensure_h2load() -> bool:
    """h2load (Debian's nghttp2-client), the http2 group's load generator."""
    if shutil.which("h2load"):
        return True
    ok, note = apt_install(["nghttp2-client"])
    if not ok:
        say(f"the http2 group will not run: {note}")
    return shutil.which("h2load") is not None


def ensure_system_peers() -> dict[str, dict]:
    """The Debian packages of every server that needs some; returns each such server's status."""
    status: dict[str, dict] = {}
    for server in SERVERS:
        if server.apt_packages:
            ok, note = apt_install(list(server.apt_packages))
            status[server.name] = {"ok": ok, "note": note}
            if not ok:
                say(f"{server.name} will be skipped: {note}")
    return status


def ensure_oha() -> bool:
    """oha from crates.io, built into benches/.tools/bin (a few minutes of compiling, so opt-in)."""
    if shutil.which("oha") or (TOOLS_DIR / "bin" / "oha").exists():
        return True
    if shutil.which("cargo") is None:
        say("oha needs cargo (a Rust toolchain)")
        return False
    say("building oha from crates.io into benches/.tools (takes a few minutes)")
    argv = ["cargo", "install", "oha", "--locked", "--root", str(TOOLS_DIR)]
    return subprocess.run(argv, check=False).returncode == 0


def peer_requirement_sets() -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Server name -> (pip requirements, requirements installed without their dependencies), for
    every server that lives in the bench venv."""
    return {
        server.name: (server.requirements, server.requirements_without_deps)
        for server in SERVERS
        if server.venv == "bench"
    }


def requirements_digest() -> str:
    wanted = {"peers": peer_requirement_sets(), "charts": CHART_REQUIREMENTS}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()


def pip_install(python: Path, requirements: tuple[str, ...], *, with_deps: bool = True) -> tuple[bool, str]:
    if not requirements:
        return True, ""
    argv = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *requirements]
    if not with_deps:
        argv.insert(4, "--no-deps")
    completed = subprocess.run(argv, capture_output=True, text=True, check=False)
    if completed.returncode == 0:
        return True, ""
    output = (completed.stderr or completed.stdout).strip().splitlines()
    # pip ends with a generic line; the compiler's or resolver's first error says what went wrong.
    errors = [line.strip() for line in output if "error" in line.lower()][:2]
    return False, f"pip install {' '.join(requirements)} failed: {' | '.join(errors or output[-2:])}"[:400]


def install_peer(python: Path, requirements: tuple[str, ...], without_deps: tuple[str, ...]) -> tuple[bool, str]:
    ok, note = pip_install(python, requirements)
    if ok and without_deps:
        ok, note = pip_install(python, without_deps, with_deps=False)
    return ok, note


def ensure_bench_venv(force: bool = False) -> dict[str, dict]:
    """Creates .venv-bench and installs every peer into it; returns (and records) each peer's status."""
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        say(f"creating {BENCH_VENV}")
        venv.EnvBuilder(with_pip=True, clear=False).create(BENCH_VENV)
    digest = requirements_digest()
    if not force and STAMP_FILE.exists() and STAMP_FILE.read_text().strip() == digest:
        try:
            return json.loads(PEER_STATUS_FILE.read_text())
        except (OSError, ValueError):
            pass
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--upgrade", "pip"], check=False
    )
    status: dict[str, dict] = {}
    installed: dict[tuple[tuple[str, ...], tuple[str, ...]], tuple[bool, str]] = {}
    for name, requirement_set in peer_requirement_sets().items():
        if requirement_set not in installed:
            requirements, without_deps = requirement_set
            listed = " ".join([*requirements, *(f"{package} (--no-deps)" for package in without_deps)])
            say(f"installing {name}: {listed}")
            installed[requirement_set] = install_peer(python, requirements, without_deps)
        ok, note = installed[requirement_set]
        status[name] = {"ok": ok, "note": note}
        if not ok:
            say(f"{name} will be skipped: {note}")
    say(f"installing chart tools: {' '.join(CHART_REQUIREMENTS)}")
    ok, note = pip_install(python, CHART_REQUIREMENTS)
    status["charts"] = {"ok": ok, "note": note}
    if not ok:
        say(f"charts will be skipped: {note}")
    PEER_STATUS_FILE.write_text(json.dumps(status, indent=2) + "\n")
    # Only a complete success is remembered; a failed peer is retried next time (the network may be back).
    if all(entry["ok"] for entry in status.values()):
        STAMP_FILE.write_text(digest + "\n")
    elif STAMP_FILE.exists():
        STAMP_FILE.unlink()
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.tools", description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="reinstall the peers even if the stamp says done")
    parser.add_argument("--oha", action="store_true", help="also build the oha load generator (slow)")
    parser.add_argument("--no-rust", action="store_true", help="do not build the Rust peers (actix-web, hyper)")
    arguments = parser.parse_args(argv)
    wrk_ok = ensure_wrk()
    h2load_ok = ensure_h2load()
    system_status = ensure_system_peers()
    status = ensure_bench_venv(force=arguments.force)
    for name, entry in system_status.items():
        # A peer needing both (bjoern: libev-dev, then pip) is usable only if both installed.
        if not entry["ok"] or name not in status:
            status[name] = entry
    if arguments.no_rust:
        say("Rust peers not built (--no-rust)")
    else:
        say("building the Rust peers (cargo build --release; a few minutes the first time)")
        ok, note = rust_peers.build()
        for server in SERVERS:
            if any(part.startswith("{rust_bin}") for argv in server.apps.values() for part in argv):
                status[server.name] = {"ok": ok, "note": note}
        if not ok:
            say(f"Rust peers will be skipped: {note}")
    PEER_STATUS_FILE.write_text(json.dumps(status, indent=2) + "\n")
    if arguments.oha:
        ensure_oha()
    installed = [name for name, entry in status.items() if entry["ok"]]
    failed = [name for name, entry in status.items() if not entry["ok"]]
    say(
        f"wrk: {'ok' if wrk_ok else 'MISSING'}; h2load: {'ok' if h2load_ok else 'MISSING'}; "
        f"installed: {', '.join(installed) or 'none'}"
    )
    if failed:
        say(f"not installed (skipped when benchmarking): {', '.join(failed)}")
    # Missing peers are not an error (they are skipped); a missing wrk is, since nothing can be measured.
    return 0 if wrk_ok else 1


if __name__ == "__main__":
    sys.exit(main())
