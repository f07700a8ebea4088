"""The command line of the benchmark suite (``python -m benches --help``).

    python -m benches [--scenarios ...] [--servers ...] [--duration S] [--repeat N] [--quick] [--list]

It selects scenarios and servers, skips (with a note) servers that are not
installed, runs the interleaved plan (`benches.runner`), writes every raw run
and the medians to ``benches/results/<timestamp>.json``, and, for a complete
measurement of a group, records it in ``benches/results/latest.json``, draws
the group's chart with the bench venv's Python and regenerates the tables of
benches/README.md. ``--quick`` is for checking the mechanics (short runs, one
repeat): its results go to benches/results/smoke/ and never reach the README.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from benches import BENCHES_DIR, REPO_ROOT, catalog
from benches.apps.site import ensure_site
from benches.environment import collect_environment, command_output
from benches.h3load import H3_LOAD
from benches.report import (
    CHARTS_DIR,
    LATEST_PATH,
    format_mb,
    format_ms,
    format_us,
    load_latest,
    merge_into_latest,
    update_readme,
)
from benches.results import results_document, summarise, write_results
from benches.runner import Settings, check_prerequisites, needed_open_files, plan, raise_open_file_limit, run_all
from benches.scenarios import GROUPS, Scenario, select_scenarios
from benches.servers import SERVERS, Launch, Server, select_servers, server_version, unavailable_reason
from benches.wrk import WS_LOAD, readable_command, wrk_command

RESULTS_DIR = BENCHES_DIR / "results"
SMOKE_DIR = RESULTS_DIR / "smoke"
QUICK_DURATION_S, QUICK_WARMUP_S = 3.0, 1.0
H2LOAD_PROTOCOLS = {
    "h2load": "h2c",
    "h2load-h1": "HTTP/1.1",
    "h2load-tls": "HTTP/2 over TLS",
    "h2load-tls-h1": "HTTP/1.1 over TLS",
}
BUSY_LOAD_AVERAGE = 0.5


def split_names(values: list[str] | None) -> list[str] | None:
    """``["a,b", "c"]`` -> ``["a", "b", "c"]``: both spaces and commas separate names."""
    if not values:
        return None
    return [name for value in values for name in value.split(",") if name]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benches",
        description="Measure rush and its peers side by side (method: benches/README.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--scenarios", nargs="+", metavar="NAME", help="groups or scenarios (default: all)")
    parser.add_argument("--servers", nargs="+", metavar="NAME", help="servers (default: all default servers)")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of measured load per run")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of load before measuring")
    parser.add_argument("--repeat", type=int, default=3, help="runs per server and scenario (median kept)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: {QUICK_DURATION_S:g} s runs, {QUICK_WARMUP_S:g} s warm-up, 1 repeat; README left alone",
    )
    parser.add_argument("--list", action="store_true", help="list groups, scenarios and servers, then exit")
    parser.add_argument(
        "--readme",
        choices=("auto", "always", "never"),
        default="auto",
        help="update benches/README.md: auto = for groups measured completely with every default server",
    )
    parser.add_argument("--report", action="store_true", help="only redraw charts and README from latest.json")
    parser.add_argument("--server-cpu", type=int, default=1, help="core the server is pinned to")
    parser.add_argument("--client-cpu", type=int, default=0, help="core wrk (and this runner) are pinned to")
    return parser


def list_everything(out=sys.stdout) -> None:
    out.write("Scenario groups:\n")
    for group, scenarios in GROUPS.items():
        out.write(f"  {group}\n")
        previous_servers = None
        for scenario in scenarios:
            load = f"-t{scenario.threads} -c{scenario.connections}"
            if scenario.websocket:
                generator = "ws-load" if scenario.load == "websocket" else "wsclient idle"
                load = f"{generator}, {scenario.connections} connections, {scenario.message_size} B"
            elif scenario.load.startswith("h2load"):
                protocol = H2LOAD_PROTOCOLS[scenario.load]
                load = f"h2load {protocol} -c{scenario.connections} -m{scenario.streams}"
            elif scenario.load == "h2-idle":
                load = f"h2idle, {scenario.connections} idle h2c connections"
            elif scenario.load == "h3-load":
                load = f"h3-load -c{scenario.connections} -m{scenario.streams}"
            elif scenario.load == "h3-handshakes":
                load = f"h3-load --handshakes -c{scenario.connections} {' '.join(scenario.wrk_args)}".rstrip()
            elif scenario.load == "h3-idle":
                load = f"h3-load --idle, {scenario.connections} idle HTTP/3 connections"
            if scenario.pipeline > 1:
                load += f", pipelined {scenario.pipeline}"
            if scenario.workers > 1:
                load += f", {scenario.workers} workers"
            servers = ", ".join(server.name for server in SERVERS if server.default and server.serves(scenario))
            out.write(f"    {scenario.key:<34} {scenario.title:<34} ({load})\n")
            # The server list is printed when it changes, not repeated for every scenario of a group.
            if servers != previous_servers:
                out.write(f"      servers: {servers}\n")
                previous_servers = servers
    out.write("Servers:\n")
    for server in SERVERS:
        reason = unavailable_reason(server)
        state = "ready" if reason is None else f"unavailable: {reason}"
        variant = "" if server.default else " [variant, run only when named]"
        out.write(f"  {server.name:<26} {server.title}{variant} - {state}\n")


def readable_server_command(server: Server, app: str, settings: Settings, workers: int = 1) -> str:
    """The command for ``app`` as the README shows it: PORT and WORKDIR for what changes per run,
    paths relative to the repository."""
    venv = server.venv_dir(settings.rush_venv, settings.bench_venv)
    launch = Launch(
        app=app,
        host=settings.host,
        port="PORT",  # type: ignore[arg-type]  # a placeholder for the README, not a real port
        bin_dir=venv / "bin" if venv else None,
        workdir=Path("WORKDIR"),
        workers=workers,
    )
    return shlex.join(server.command(launch)).replace(str(REPO_ROOT) + "/", "")


def server_commands(server: Server, scenarios: list[Scenario], settings: Settings) -> dict[str, str]:
    """``"app"`` (or ``"app, N workers"``) -> the command, for each way the scenarios start ``server``."""
    commands = {}
    for scenario in scenarios:
        if server.serves(scenario):
            label = scenario.app + (f", {scenario.workers} workers" if scenario.workers > 1 else "")
            commands[label] = readable_server_command(server, scenario.app, settings, scenario.workers)
    return commands


def python_versions(servers: list[Server], settings: Settings) -> dict[str, str]:
    versions = {}
    venvs = {server.venv_dir(settings.rush_venv, settings.bench_venv) for server in servers}
    for venv in sorted(venv for venv in venvs if venv is not None):
        line = command_output([str(venv / "bin" / "python"), "--version"])
        versions[venv.name] = (line or "?").replace("Python ", "")
    return versions


def complete_groups(scenarios: list[Scenario], servers: list[Server], mode: str) -> list[str]:
    """Groups whose tables this run may replace: with ``auto``, only groups measured completely
    (every scenario) with every default server that serves the group selected, so a partial run
    never erases a table."""
    ran = {scenario.group for scenario in scenarios}
    if mode == "always":
        return [group for group in GROUPS if group in ran]
    if mode == "never":
        return []
    selected_scenarios = {scenario.key for scenario in scenarios}
    selected_servers = {server.name for server in servers}
    complete = []
    for group, group_scenarios in GROUPS.items():
        needed = {
            server.name
            for server in SERVERS
            if server.default and any(server.serves(scenario) for scenario in group_scenarios)
        }
        if (
            group_scenarios
            and all(scenario.key in selected_scenarios for scenario in group_scenarios)
            and needed <= selected_servers
        ):
            complete.append(group)
    return complete


def draw_charts(settings: Settings, groups: list[str]) -> None:
    python = settings.bench_venv / "bin" / "python"
    if not python.exists():
        print("charts: skipped (no bench venv; run `make bench-tools`)", file=sys.stderr)
        return
    argv = [str(python), "-m", "benches.chart", str(LATEST_PATH), str(CHARTS_DIR), *groups]
    completed = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        last = (completed.stderr.strip().splitlines() or ["?"])[-1]
        print(f"charts: skipped ({last})", file=sys.stderr)
    else:
        sys.stderr.write(completed.stdout)


def print_summary(document: dict, out=sys.stdout) -> None:
    out.write("\nMedians:\n")
    for summary in document["summaries"]:
        label = f"  {summary['scenario']:<26} {summary['server']:<20}"
        if not summary["ok"]:
            out.write(f"{label} FAILED ({'; '.join(summary['failures'])})\n")
            continue
        medians = summary["medians"]
        if "rss_per_connection_bytes" in medians:
            out.write(f"{label} {medians['rss_per_connection_bytes'] / 1024:>9.2f} KiB RSS per idle connection\n")
            continue
        rate, per = ("msg/s", "msg") if summary["scenario"].startswith("websocket/") else ("rps", "req")
        out.write(
            f"{label} {medians['requests_per_second']:>12,.0f} {rate}  p50 {format_ms(medians.get('p50_ms'))}  "
            f"p99 {format_ms(medians.get('p99_ms'))}  {format_us(medians.get('cpu_us_per_request'))} CPU/{per}  "
            f"peak RSS {format_mb(medians.get('peak_rss_bytes'))}\n"
        )


def main(argv: list[str] | None = None) -> int:
    arguments = build_parser().parse_args(argv)
    if arguments.list:
        list_everything()
        return 0
    settings = Settings(
        duration_s=QUICK_DURATION_S if arguments.quick else arguments.duration,
        warmup_s=QUICK_WARMUP_S if arguments.quick else arguments.warmup,
        repeat=1 if arguments.quick else arguments.repeat,
        server_cpu=arguments.server_cpu,
        client_cpu=arguments.client_cpu,
    )
    if arguments.report:
        groups = list(load_latest().get("groups", {}))
        draw_charts(settings, groups)
        update_readme(load_latest(), list(GROUPS))
        print(f"README regenerated from {LATEST_PATH.relative_to(REPO_ROOT)}")
        return 0
    try:
        scenarios = select_scenarios(split_names(arguments.scenarios))
        servers = select_servers(split_names(arguments.servers))
    except ValueError as error:
        print(f"benches: {error}", file=sys.stderr)
        return 2
    # Only the servers some selected scenario needs: no probing, and no "skipped" note, for the others.
    servers = [server for server in servers if any(server.serves(scenario) for scenario in scenarios)]
    problems = check_prerequisites(settings)
    if any(scenario.load.startswith("h2load") for scenario in scenarios) and shutil.which("h2load") is None:
        problems.append("h2load is not on PATH (`make bench-tools` installs Debian's nghttp2-client)")
    if any(scenario.load == "websocket" for scenario in scenarios) and not WS_LOAD.exists():
        problems.append(f"{WS_LOAD.relative_to(REPO_ROOT)} is not built (`make bench-tools` builds benches/rust)")
    if any(scenario.http3 for scenario in scenarios) and not H3_LOAD.exists():
        problems.append(f"{H3_LOAD.relative_to(REPO_ROOT)} is not built (`make bench-tools` builds benches/rust)")
    if problems:
        print("benches: cannot measure:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    if settings.server_cpu == settings.client_cpu:
        print("benches: WARNING: server and wrk share one core; numbers will not be comparable", file=sys.stderr)

    available, skipped = [], {}
    for server in servers:
        reason = unavailable_reason(server, settings.rush_venv, settings.bench_venv)
        if reason is None:
            available.append(server)
        else:
            skipped[server.name] = reason
            print(f"benches: skipping {server.name}: {reason}", file=sys.stderr)
    if not available:
        print("benches: no server to measure", file=sys.stderr)
        return 2

    # The runner's own work (checks, RSS sampling) stays off the server's core.
    os.sched_setaffinity(0, {settings.client_cpu})
    soft_limit, hard_limit = raise_open_file_limit(needed_open_files(scenarios))
    if soft_limit < needed_open_files(scenarios):
        print(
            f"benches: WARNING: only {soft_limit} open files allowed (hard limit {hard_limit}); "
            "the 1000-connection scenarios may fail with socket errors",
            file=sys.stderr,
        )
    # The static files are served by nginx as well, which imports nothing of ours to create them.
    ensure_site()
    load = os.getloadavg()[0]
    if load > BUSY_LOAD_AVERAGE and not arguments.quick:
        print(f"benches: WARNING: load average is {load:.2f}; other work will make numbers noisy", file=sys.stderr)
    # The catalog group's databases (SQLite file, throwaway PostgreSQL and MariaDB servers): started
    # for this run, stopped by PID when it ends; scenarios whose database cannot start are left out.
    prepared = catalog.prepare(scenarios, settings.client_cpu)
    try:
        scenarios = prepared.scenarios
        for kind, note in prepared.notes.items():
            skipped[f"catalog-{kind}"] = note
        runs = plan(scenarios, available, settings.repeat)
        if not runs:
            print("benches: none of the selected servers serves the selected scenarios", file=sys.stderr)
            return 2
        print(
            f"benches: {len(runs)} runs: {len(scenarios)} scenarios, {len(available)} servers, {settings.repeat} "
            f"repeats, {settings.duration_s:g} s each after {settings.warmup_s:g} s warm-up; logs in "
            f"{settings.log_dir}",
            file=sys.stderr,
        )
        records = run_all(runs, settings)
    finally:
        prepared.stop()

    timestamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    environment = collect_environment(
        {server.name: server_version(server, settings.rush_venv, settings.bench_venv) for server in available},
        python_versions(available, settings),
    )
    document = results_document(
        environment=environment,
        settings={
            "duration_s": settings.duration_s,
            "warmup_s": settings.warmup_s,
            "repeat": settings.repeat,
            "server_cpu": settings.server_cpu,
            "client_cpu": settings.client_cpu,
            "host": settings.host,
            "quick": arguments.quick,
            "command": " ".join(["python -m benches", *(argv if argv is not None else sys.argv[1:])]),
        },
        scenarios=scenarios,
        servers={
            server.name: {
                "title": server.title,
                "commands": server_commands(server, scenarios, settings),
                "version": environment["servers"].get(server.name, "?"),
                "notes": server.notes,
            }
            for server in available
        },
        runs=records,
    )
    document["skipped"] = skipped
    document["wrk_commands"] = {
        scenario.key: readable_command(
            wrk_command(scenario, f"{'https' if scenario.tls else 'http'}://{settings.host}:PORT", settings.duration_s)
        )
        for scenario in scenarios
    }
    results_path = (SMOKE_DIR if arguments.quick else RESULTS_DIR) / f"{timestamp}.json"
    write_results(results_path, document)
    print_summary(document)
    print(f"\nresults: {results_path.relative_to(REPO_ROOT)}")

    readme_mode = "never" if arguments.quick and arguments.readme == "auto" else arguments.readme
    groups = complete_groups(scenarios, servers, readme_mode)
    if groups:
        latest = merge_into_latest(load_latest(), document, groups, str(results_path.relative_to(BENCHES_DIR)))
        write_results(LATEST_PATH, latest)
        draw_charts(settings, groups)
        update_readme(latest, list(GROUPS))
        print(f"README tables regenerated for: {', '.join(groups)}")
    else:
        print("README not updated (smoke run, partial run, or --readme never)")
    failed = [summary for summary in summarise(records) if not summary.ok]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
