"""The soak's orchestrator: starts the three servers, the two client
processes, sends the SIGHUPs, samples memory, stops everything, and reports.

    python -m soak [--minutes N]        # default: $SOAK_MINUTES, else 30

Writes ``soak/results/soak-<date>.json`` (the whole record and the verdicts)
and keeps the servers' and clients' logs in ``soak/results/soak-<date>/``.
Exit status: 0 when every criterion holds (see soak/report.py), 1 when one
fails, 2 when the servers could not even start.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from soak.plan import (
    HUP_INTERVAL,
    HUP_STAGGER,
    SAMPLE_INTERVAL,
    SERVERS,
    STATIC_PREFIX,
    WORKERS,
    rate_scale,
    site_files,
    write_ports,
)
from soak.report import analyse, render
from soak.servers import REPO, Server, scan_log

RESULTS = Path(__file__).resolve().parent / "results"
PROGRESS_INTERVAL = 60.0
CLIENT_GRACE = 30.0  # how long after the deadline a client process may take to write its result


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", flush=True)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def progress(started_at: float, wellformed_out: Path, servers: dict[str, Server], sample: dict[str, Any]) -> None:
    snapshot = read_json(wellformed_out) or {"scenarios": {}}
    ok = sum(scenario["ok"] for scenario in snapshot["scenarios"].values())
    failed: dict[str, int] = {}
    for scenario in snapshot["scenarios"].values():
        for kind, count in scenario["failed"].items():
            failed[kind] = failed.get(kind, 0) + count
    memory = "; ".join(
        f"{name} " + " ".join(f"{worker['rss_kb'] // 1024}" for worker in sample[name]["workers"].values())
        for name in servers
    )
    kinds = ", ".join(f"{kind} {count}" for kind, count in sorted(failed.items())) or "none"
    log(f"{(time.time() - started_at) / 60:.1f} min: {ok} ok, failed: {kinds}; worker RSS MiB: {memory}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MINUTES") or 30))
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.minutes > 24 * 60:
        parser.error("--minutes must be more than 0 and at most a day")

    try:
        scale = rate_scale()
    except ValueError as error:
        parser.error(str(error))
    stamp = time.strftime("%Y-%m-%d-%H%M%S")
    run_dir = args.results / f"soak-{stamp}"
    site = run_dir / "site"
    site.mkdir(parents=True)
    for name, content in site_files().items():
        (site / name).write_bytes(content)

    servers = {
        name: Server(name, app, run_dir, ["--static", f"{STATIC_PREFIX}={site}"] if name == "rush" else [])
        for name, app in SERVERS.items()
    }
    clients: dict[str, subprocess.Popen[bytes]] = {}
    samples: list[dict[str, Any]] = []
    aborted: str | None = None
    started_at = time.time()
    try:
        for server in servers.values():
            server.start()
        for server in servers.values():
            server.wait_ready()
            log(f"{server.name}: {' '.join(server.command()[1:])} (supervisor {server.pid})")
    except RuntimeError as error:
        log(f"could not start the servers: {error}")
        for server in servers.values():
            server.stop()
        return 2

    try:
        started_at = time.time()
        deadline = started_at + args.minutes * 60
        ports_file = run_dir / "ports.json"
        write_ports(str(ports_file), {name: server.port for name, server in servers.items()}, started_at, deadline)
        for role in ("wellformed", "hostile"):
            with open(run_dir / f"{role}.log", "wb") as output:
                clients[role] = subprocess.Popen(
                    [sys.executable, "-m", f"soak.{role}", str(ports_file), str(run_dir / f"{role}.json")],
                    cwd=REPO,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                )
        log(f"traffic started for {args.minutes:g} min; logs in {run_dir}")
        hup_times = {
            name: [
                started_at + HUP_INTERVAL * (1 + k) + index * HUP_STAGGER
                for k in range(int(args.minutes * 60 / HUP_INTERVAL) + 1)
                if HUP_INTERVAL * (1 + k) + index * HUP_STAGGER < args.minutes * 60 - 5
            ]
            for index, name in enumerate(servers)
        }
        next_sample = started_at
        next_progress = started_at + PROGRESS_INTERVAL
        while time.time() < deadline:
            now = time.time()
            if now >= next_sample:
                sample = {name: server.sample() for name, server in servers.items()}
                samples.append({"t": round(now - started_at, 1), "servers": sample})
                next_sample += SAMPLE_INTERVAL
                if now >= next_progress:
                    progress(started_at, run_dir / "wellformed.json", servers, sample)
                    next_progress += PROGRESS_INTERVAL
            for name, server in servers.items():
                while hup_times[name] and hup_times[name][0] <= now:
                    hup_times[name].pop(0)
                    server.hup()
            dead = [name for name, server in servers.items() if not server.running()]
            if dead:
                aborted = f"server {dead[0]} exited during the run (status {servers[dead[0]].proc.returncode})"  # type: ignore[union-attr]
                log(aborted)
                break
            for role, process in clients.items():
                if process.poll() not in (None, 0):
                    aborted = f"the {role} client process failed (status {process.returncode}; see {role}.log)"
            if aborted:
                log(aborted)
                break
            upcoming = [next_sample, deadline, *(times[0] for times in hup_times.values() if times)]
            time.sleep(min(max(min(upcoming) - time.time(), 0.01), 0.5))
        now = time.time()
        samples.append(
            {"t": round(now - started_at, 1), "servers": {name: server.sample() for name, server in servers.items()}}
        )
        for role, process in clients.items():
            try:
                process.wait(max(deadline - time.time(), 0) + CLIENT_GRACE)
            except subprocess.TimeoutExpired:
                log(f"the {role} client did not finish: stopping it")
                process.kill()
                process.wait()
    finally:
        for process in clients.values():
            if process.poll() is None:
                process.kill()
                process.wait()
        log("stopping the servers (SIGTERM)")
        for server in servers.values():
            with contextlib.suppress(Exception):
                server.stop()

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    record: dict[str, Any] = {
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "stamp": stamp,
        "minutes": args.minutes,
        "elapsed_s": time.time() - started_at,
        "workers": WORKERS,
        "rate_scale": scale,
        "hup_interval": HUP_INTERVAL,
        "started_at": started_at,
        "aborted": aborted,
        "servers": {
            name: {
                "app": server.app,
                "command": server.command(),
                "port": server.port,
                "hups_t": [round(hup - started_at, 1) for hup in server.hups],
                "exit_code": server.exit_code,
                "stop_problem": server.stop_problem,
                "log": asdict(scan_log(server.stderr_path)),
            }
            for name, server in servers.items()
        },
        "samples": samples,
        "wellformed": read_json(run_dir / "wellformed.json"),
        "hostile": read_json(run_dir / "hostile.json"),
    }
    for role in ("wellformed", "hostile"):
        if record[role] is not None and not record[role].get("finished"):
            record["aborted"] = record["aborted"] or f"the {role} client did not write its final result"
    analysis = analyse(record)
    record["analysis"] = analysis
    report = render(record, analysis)
    result_path = args.results / f"soak-{stamp}.json"
    result_path.write_text(json.dumps(record, indent=1, default=str))
    (run_dir / "report.txt").write_text(report + "\n")
    print(report)
    print(f"\nresult: {result_path}")
    return 0 if analysis["passed"] else 1
