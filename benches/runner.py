"""One measured run, and the interleaved schedule of all runs with progress and time left.

`measure` is the method, step by step, for one server on one scenario:

1. pick a free port and make sure nothing answers on it (so what answers later is ours);
2. write the server's config if it needs one (nginx), into a work directory of the run's own,
   then start the server pinned to the server core (``taskset -c``), output to a log file
   (a multi-worker scenario cannot be pinned to one core: it gets the server's and wrk's);
3. wait until it answers HTTP (TCP connect plus a real request), with a timeout;
4. check the scenario's response (status, headers, body; pipelined as deep as the
   scenario; connection closed for ``Connection: close``);
5. note the idle RSS, then warm up with the same wrk command for a few seconds;
6. read the server tree's CPU time, run wrk pinned to the client core while a
   sampler watches RSS, read the CPU time again;
7. check the response again (the server survived the load and still answers right);
8. judge wrk's report (socket errors, statuses) and stop the server by its PID.

A proxy scenario (one with an ``origin_app``) first starts its origin (nginx) on a port of
its own, pinned to the client core, and names it in the scenario's absolute-form target; the
proxy is then measured like any server, and the origin stopped after it.

`plan` interleaves: for each scenario, for each repeat, every server once, the
servers' order rotating by one each repeat, so slow drift of the machine (heat,
other load) spreads over all servers instead of favouring the one that ran first.
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TextIO

from benches import REPO_ROOT, catalog, wsclient
from benches.httpcheck import (
    CheckFailed,
    answers_h2,
    answers_h3,
    answers_http,
    check_h2_scenario,
    check_h3_scenario,
    check_scenario,
    free_port,
    port_is_free,
    wait_until_answering,
)
from benches.processes import RssSampler, ServerProcess
from benches.results import RunRecord, wrk_failure
from benches.scenarios import Scenario
from benches.servers import BENCH_VENV, ORIGIN_SERVER, RUSH_VENV, SERVERS, Launch, Server
from benches.tls import ensure_certificate
from benches.wrk import WrkError, parse_load_output, tunnel_command, wrk_command

# How many paths of a spread (Scenario.spread) are checked again after the load; all are before.
AFTER_LOAD_CHECKS = 20


@dataclass
class Settings:
    duration_s: float = 10.0
    warmup_s: float = 2.0
    repeat: int = 3
    host: str = "127.0.0.1"
    server_cpu: int = 1
    client_cpu: int = 0
    startup_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0
    # A pause between runs, so sockets in TIME_WAIT and the previous server's exit settle.
    pause_s: float = 1.0
    wrk: str = "wrk"
    rush_venv: Path = RUSH_VENV
    bench_venv: Path = BENCH_VENV
    # Server output, one file per run; shown (last lines) when a run fails.
    log_dir: Path = field(
        default_factory=lambda: Path(tempfile.gettempdir()) / time.strftime("rush-bench-logs-%Y%m%d-%H%M%S")
    )

    def server_cores(self, scenario: Scenario) -> str:
        """The ``taskset -c`` list for the server: its own core, or with several workers both cores
        (several workers on one core would measure the scheduler, not the server)."""
        if scenario.workers > 1:
            return ",".join(str(cpu) for cpu in sorted({self.server_cpu, self.client_cpu}))
        return str(self.server_cpu)

    def estimated_run_seconds(self) -> float:
        """A first guess of one run's wall time, before any run has been timed."""
        return 1.5 + self.warmup_s + self.duration_s + self.pause_s + 0.5


@dataclass(frozen=True)
class PlannedRun:
    scenario: Scenario
    server: Server
    repeat: int


def plan(scenarios: list[Scenario], servers: list[Server], repeat: int) -> list[PlannedRun]:
    runs = []
    for scenario in scenarios:
        eligible = [server for server in servers if server.serves(scenario)]
        for index in range(repeat):
            shift = index % len(eligible) if eligible else 0
            for server in eligible[shift:] + eligible[:shift]:
                runs.append(PlannedRun(scenario, server, index + 1))
    return runs


def check_prerequisites(settings: Settings) -> list[str]:
    """Problems that make measuring impossible or meaningless (empty when all is well)."""
    problems = []
    if shutil.which(settings.wrk) is None:
        problems.append(f"{settings.wrk} is not on PATH (run `make bench-tools`)")
    if shutil.which("taskset") is None:
        problems.append("taskset is not on PATH (apt-get install util-linux)")
    allowed = os.sched_getaffinity(0)
    for role, cpu in (("server", settings.server_cpu), ("client", settings.client_cpu)):
        if cpu not in allowed:
            problems.append(f"{role} CPU {cpu} is not available (this process may use {sorted(allowed)})")
    return problems


def needed_open_files(scenarios: list[Scenario]) -> int:
    """File descriptors wrk and each server need at once: a socket per connection on each side,
    plus room for listeners, logs and libraries."""
    return 2 * max((scenario.connections for scenario in scenarios), default=0) + 1024


def raise_open_file_limit(wanted: int) -> tuple[int, int]:
    """Raises this process's soft RLIMIT_NOFILE towards ``wanted`` (never above the hard limit,
    never lowering it), so wrk and the servers, which inherit it, can open 1000 connections on a
    machine whose default soft limit is 1024. Returns (the soft limit now, the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = max(soft, wanted) if hard == resource.RLIM_INFINITY else min(hard, max(soft, wanted))
    if target != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target, hard


def server_environment(server: Server, settings: Settings) -> dict[str, str]:
    venv = server.venv_dir(settings.rush_venv, settings.bench_venv)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    # So a server's last words reach its log file when it fails (servers log little at level warning).
    env["PYTHONUNBUFFERED"] = "1"
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return env


def run_wrk(argv: list[str], settings: Settings, duration_s: float) -> tuple[str, float]:
    """Runs wrk pinned to the client core; returns (its output, the CPU seconds it used)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    completed = subprocess.run(
        ["taskset", "-c", str(settings.client_cpu), *argv],
        capture_output=True,
        text=True,
        timeout=duration_s + 60,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if completed.returncode != 0:
        message = (completed.stderr or completed.stdout).strip().splitlines()
        raise WrkError(f"{Path(argv[0]).name} exited with {completed.returncode}: {' | '.join(message[-3:])}")
    return completed.stdout, used


def check_answers(scenario: Scenario, host: str, port: int, limit: int | None = None) -> None:
    """The scenario's correctness check: `check_scenario` (the first ``limit`` paths of a spread),
    for a tunnel scenario one request through a fresh tunnel by benches/tunnel_load.py, for a
    WebSocket scenario `benches.wsclient.check` (echoed bytes, or every member's deliveries);
    raises CheckFailed when wrong."""
    if scenario.http2:
        check_h2_scenario(scenario, host, port)
        return
    if scenario.load == "h2load-tls":
        check_h2_scenario(scenario, host, port, tls=True)
        return
    if scenario.http3:
        check_h3_scenario(scenario, host, port)
        return
    if scenario.websocket:
        try:
            wsclient.check(f"ws://{host}:{port}{scenario.path}", scenario.ws_mode, scenario.message_size)
        except wsclient.WsCheckFailed as error:
            raise CheckFailed(str(error)) from error
        return
    if scenario.load != "tunnel":
        check_scenario(scenario, host, port, limit=limit)
        return
    argv = tunnel_command(scenario, f"http://{host}:{port}", 0, check=True)
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if completed.returncode != 0:
        raise CheckFailed(f"CONNECT {scenario.path}: {completed.stderr.strip() or completed.stdout.strip()}")


def start_origin(scenario: Scenario, settings: Settings, run_name: str) -> tuple[ServerProcess, int]:
    """Starts the origin a proxy scenario asks for (nginx serving ``scenario.origin_app``) on a
    free port, pinned to the load generator's core so the proxy keeps its own; returns it once it
    answers, with its port."""
    origin = next(server for server in SERVERS if server.name == ORIGIN_SERVER)
    port = free_port(settings.host)
    launch = Launch(
        app=scenario.origin_app or "",
        host=settings.host,
        port=port,
        bin_dir=None,
        workdir=settings.log_dir / f"{run_name}.origin.work",
    )
    launch.workdir.mkdir(parents=True, exist_ok=True)
    if origin.configure is not None:
        origin.configure(launch)
    process = ServerProcess(
        ["taskset", "-c", str(settings.client_cpu), *origin.command(launch)],
        cwd=REPO_ROOT,
        env=server_environment(origin, settings),
        log_path=settings.log_dir / f"{run_name}.origin.log",
    )
    try:
        wait_until_answering(lambda: answers_http(settings.host, port), settings.startup_timeout_s, process.is_alive)
    except CheckFailed:
        process.stop(settings.stop_timeout_s)
        raise
    return process, port


def measure(planned: PlannedRun, settings: Settings) -> RunRecord:
    """One server on one scenario, following the method in this module's docstring. Never raises
    for a server's misbehaviour: whatever went wrong becomes the record's ``failure``."""
    scenario, server = planned.scenario, planned.server
    record = RunRecord(scenario=scenario.key, server=server.name, repeat=planned.repeat)
    started = time.monotonic()
    if scenario.tls:
        ensure_certificate()
    port = free_port(settings.host)
    if not port_is_free(settings.host, port):
        record.failure = f"port {port} already answers before the server starts"
        return record
    venv = server.venv_dir(settings.rush_venv, settings.bench_venv)
    run_name = f"{scenario.group}-{scenario.name}-{server.name}-{planned.repeat}"
    origin: ServerProcess | None = None
    origin_port = 0
    if scenario.origin_app is not None:
        settings.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            origin, origin_port = start_origin(scenario, settings, run_name)
        except (CheckFailed, OSError) as error:
            record.failure = f"the origin did not start: {error}"
            return record
        # The scenario as measured: its absolute-form target names this run's origin.
        scenario = replace(scenario, path=scenario.path.format(origin=f"{settings.host}:{origin_port}"))
    launch = Launch(
        app=scenario.app,
        host=settings.host,
        port=port,
        bin_dir=venv / "bin" if venv else None,
        workdir=settings.log_dir / f"{run_name}.work",
        workers=scenario.workers,
        origin_port=origin_port,
    )
    command = ["taskset", "-c", settings.server_cores(scenario), *server.command(launch)]
    record.server_command = command
    url = f"{'https' if scenario.tls else 'http'}://{settings.host}:{port}"
    record.wrk_command = wrk_command(scenario, url, settings.duration_s, settings.wrk)
    log_path = settings.log_dir / f"{run_name}.log"
    settings.log_dir.mkdir(parents=True, exist_ok=True)
    try:
        launch.workdir.mkdir(parents=True, exist_ok=True)
        if server.configure is not None:
            server.configure(launch)
        # Each run starts with an empty shared level: what an earlier run stored (under its port)
        # is not this run's, and a front end that keys without the Host would serve it.
        catalog.empty_shared_level(scenario.app)
        process = ServerProcess(command, cwd=REPO_ROOT, env=server_environment(server, settings), log_path=log_path)
    except OSError as error:
        record.failure = f"cannot start the server: {error}"
        if origin is not None:
            origin.stop(settings.stop_timeout_s)
        return record
    try:
        # Through TLS for the tls group: a plain probe would pass on servers that answer plain HTTP
        # on their TLS port with a 400 (rush, nginx) and fail on the others.
        # Over h2c for the http2 group: granian --http 2 and nginx's "listen ... http2" speak nothing else.
        # Over HTTP/3 for the http3 group's HTTP/3 scenarios: the UDP listener, not the TCP one, is measured.
        if scenario.http3:
            probe = lambda: answers_h3(settings.host, port)  # noqa: E731
        elif scenario.http2:
            probe = lambda: answers_h2(settings.host, port)  # noqa: E731
        else:
            probe = lambda: answers_http(settings.host, port, tls=scenario.tls)  # noqa: E731
        wait_until_answering(probe, settings.startup_timeout_s, process.is_alive)
        check_answers(scenario, settings.host, port)
        record.idle_rss_bytes = process.rss_bytes()
        record.idle_rss_by_process = process.rss_by_process()

        if scenario.idle:
            measure_idle_connections(scenario, process, settings, port, record)
        else:
            measure_load(scenario, process, settings, url, port, record, settings.log_dir / f"{run_name}.requests.tsv")
        if record.failure is None:
            # After the load a sample of a spread is enough: the server survived and still answers right.
            check_answers(scenario, settings.host, port, limit=AFTER_LOAD_CHECKS)
    except (CheckFailed, WrkError, OSError, subprocess.TimeoutExpired) as error:
        record.failure = f"{type(error).__name__}: {error}" if not isinstance(error, CheckFailed) else str(error)
    finally:
        process.stop(settings.stop_timeout_s)
        if origin is not None:
            origin.stop(settings.stop_timeout_s)
        if record.failure:
            record.server_log_tail = process.log_tail()
    record.ok = record.failure is None
    record.wall_time_s = time.monotonic() - started
    return record


def measure_load(
    scenario: Scenario,
    process: ServerProcess,
    settings: Settings,
    url: str,
    port: int,
    record: RunRecord,
    request_log: Path,
) -> None:
    """Steps 5 to 8 for a load generator (wrk, or the one the scenario names): warm-up, the
    measured window with the server's CPU time around it and RSS sampled, then the report judged
    into the record (raises CheckFailed, WrkError, OSError or TimeoutExpired). h2load writes a
    line per request to ``request_log`` (deleted once read: the latency percentiles come from it)."""
    if settings.warmup_s > 0:
        warmup_log = request_log.with_suffix(".warmup.tsv")
        run_wrk(wrk_command(scenario, url, settings.warmup_s, settings.wrk, warmup_log), settings, settings.warmup_s)
        warmup_log.unlink(missing_ok=True)
    if scenario.load.startswith("h2load"):
        record.wrk_command = wrk_command(scenario, url, settings.duration_s, settings.wrk, request_log)

    # The catalog's own counters around the window (outside it: they cost the server a request).
    app_before = catalog.read_stats(settings.host, port) if catalog.counts_queries(scenario.app) else None
    cpu_before = process.cpu_seconds()
    with RssSampler(process.pid) as sampler:
        output, client_cpu = run_wrk(record.wrk_command, settings, settings.duration_s)
    record.server_cpu_seconds = process.cpu_seconds() - cpu_before
    app_after = catalog.read_stats(settings.host, port) if app_before is not None else None
    record.sampled_peak_rss_bytes = sampler.peak_bytes
    record.peak_rss_bytes = max(process.peak_rss_bytes(), sampler.peak_bytes)

    try:
        result = parse_load_output(scenario, output, request_log if scenario.load.startswith("h2load") else None)
    finally:
        request_log.unlink(missing_ok=True)
    record.take_wrk(result, scenario)
    if app_before is not None and app_after is not None:
        record.app_per_request = catalog.per_request(app_before, app_after, result.requests)
    if result.duration_s > 0:
        record.client_cpu_utilisation = client_cpu / result.duration_s
    if result.requests:
        record.cpu_us_per_request = record.server_cpu_seconds / result.requests * 1e6
    if not process.is_alive():
        raise CheckFailed("server exited during the load")
    record.failure = wrk_failure(result, scenario)


# Seconds the server is given to settle (free what a handshake allocated for a moment) before RSS is read.
IDLE_SETTLE_S = 1.0


def read_line(child: subprocess.Popen, timeout_s: float) -> str:
    """The next line the idle-connection holder prints, or CheckFailed after ``timeout_s``."""
    ready, _, _ = select.select([child.stdout], [], [], timeout_s)
    line = child.stdout.readline() if ready else ""
    if not line:
        raise CheckFailed(f"the idle-connection holder said nothing for {timeout_s:g} s")
    return line.strip()


def measure_idle_connections(
    scenario: Scenario, process: ServerProcess, settings: Settings, port: int, record: RunRecord
) -> None:
    """The idle scenarios: benches/wsclient.py (benches/h2idle.py for h2c, h3-load --idle for
    HTTP/3) opens a few warm
    connections, the server's RSS is read, then ``scenario.connections`` more are opened (each
    after one echo, or one request) and the RSS is read again; the difference over the count is
    the memory of one idle connection. Sets the record's fields, or its failure; the holder is
    stopped either way."""
    argv = wrk_command(scenario, f"http://{settings.host}:{port}", 0)
    record.wrk_command = argv
    child = subprocess.Popen(
        ["taskset", "-c", str(settings.client_cpu), *argv],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    timeout_s = settings.startup_timeout_s + scenario.connections / 50
    try:
        first = read_line(child, timeout_s)
        if first != "warm":
            raise CheckFailed(f"the idle-connection holder did not open its warm connections: {first[:300]}")
        time.sleep(IDLE_SETTLE_S)
        before = process.rss_bytes()
        cpu_before = process.cpu_seconds()
        child.stdin.write("go\n")
        child.stdin.flush()
        ready = read_line(child, timeout_s).split()
        time.sleep(IDLE_SETTLE_S)
        after = process.rss_bytes()
        record.server_cpu_seconds = process.cpu_seconds() - cpu_before
        record.peak_rss_bytes = after
        # Any line (or the end of its input) lets the holder close its connections and report.
        output, errors = child.communicate(input="done\n", timeout=timeout_s)
    except (CheckFailed, OSError, ValueError, subprocess.TimeoutExpired) as error:
        child.kill()
        child.communicate()
        record.failure = str(error) if isinstance(error, CheckFailed) else f"{type(error).__name__}: {error}"
        return
    lines = [line for line in output.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {"ok": False, "errors": [errors.strip()[-200:] or "no report"]}
    if not report.get("ok") or child.returncode != 0:
        record.failure = "idle connections: " + "; ".join(report.get("errors") or ["failed"])
        return
    opened = int(report["connections"])
    record.requests = opened
    record.idle_connections = opened
    if scenario.websocket:
        record.ws_connections = opened
        record.ws_deflated = int(report.get("deflated", 0))
    record.rss_per_connection_bytes = (after - before) / opened if opened else None
    if ready[:1] == ["ready"] and opened:
        record.cpu_us_per_request = record.server_cpu_seconds / opened * 1e6
    if not process.is_alive():
        record.failure = "server exited while holding the idle connections"


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def describe(record: RunRecord) -> str:
    if not record.ok:
        return f"FAILED: {record.failure}"
    if record.rss_per_connection_bytes is not None:
        return f"ok: {record.rss_per_connection_bytes / 1024:.2f} KiB RSS per idle connection"
    per = "msg" if record.scenario.startswith("websocket/") else "req"
    parts = [f"{record.requests_per_second:,.0f} {per}/s"]
    if record.p99_ms is not None:
        parts.append(f"p99 {record.p99_ms:.2f} ms")
    if record.cpu_us_per_request is not None:
        parts.append(f"{record.cpu_us_per_request:.1f} us CPU/{per}")
    if record.peak_rss_bytes:
        parts.append(f"peak RSS {record.peak_rss_bytes / 1e6:.1f} MB")
    return "ok: " + ", ".join(parts)


def run_all(planned_runs: list[PlannedRun], settings: Settings, out: TextIO = sys.stderr) -> list[RunRecord]:
    """Runs every planned run in order, printing progress and the estimated time left."""
    records: list[RunRecord] = []
    total = len(planned_runs)
    for index, planned in enumerate(planned_runs):
        timed = [record.wall_time_s + settings.pause_s for record in records]
        per_run = sum(timed) / len(timed) if timed else settings.estimated_run_seconds()
        left = format_duration(per_run * (total - index))
        out.write(
            f"[{index + 1}/{total}] {planned.scenario.key} · {planned.server.name} · "
            f"run {planned.repeat} of {settings.repeat} · about {left} left\n"
        )
        out.flush()
        record = measure(planned, settings)
        records.append(record)
        out.write(f"    {describe(record)}\n")
        if record.server_log_tail and not record.ok:
            log_lines = record.server_log_tail.splitlines()
            out.write("    server log (last lines):\n" + "".join(f"      {line}\n" for line in log_lines))
        out.flush()
        if index + 1 < total:
            time.sleep(settings.pause_s)
    return records
