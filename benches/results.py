"""Results: what one run recorded, whether it counts, medians over repeats, and the results JSON.

A run counts only when nothing went wrong: the server started and answered
correctly before and after the load, wrk produced a report, there were no
socket errors, and every response had the expected class of status. wrk
counts every status >= 400 as "Non-2xx or 3xx"; for a scenario that expects
such a status (the 404) that count must equal the number of requests (and
the before/after checks confirm it is the right status), for every other
scenario it must be zero. A run that fails is kept in the JSON with its
reason and is never turned into a number.

h2load (the http2 group) counts more than wrk, and refuses more: any failed,
errored or timed-out request, or any status outside the expected class
(`benches.h2load.h2load_failure`). h3-load (the http3 group) refuses any error,
any status but the expected one and any body of the wrong length
(`benches.h3load.h3load_failure`).

A (scenario, server) pair gets numbers only when all its repeats counted;
each metric is then the median over the repeats (taken metric by metric).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benches.h2load import H2loadResult, h2load_failure
from benches.h3load import H3loadResult, h3load_failure
from benches.scenarios import Scenario
from benches.wrk import WrkResult

# The metrics a summary takes the median of, as (key in RunRecord, unit).
MEDIAN_METRICS = (
    "requests_per_second",
    "p50_ms",
    "p90_ms",
    "p99_ms",
    "cpu_us_per_request",
    "peak_rss_bytes",
    "idle_rss_bytes",
    "client_cpu_utilisation",
    "rss_per_connection_bytes",
)


@dataclass
class RunRecord:
    """Everything one measured run of one server on one scenario produced."""

    scenario: str
    server: str
    repeat: int
    ok: bool = False
    failure: str | None = None
    requests: int = 0
    duration_s: float = 0.0
    requests_per_second: float | None = None
    p50_ms: float | None = None
    p75_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    socket_errors: dict[str, int] = field(default_factory=dict)
    non_2xx_3xx: int = 0
    server_cpu_seconds: float | None = None
    cpu_us_per_request: float | None = None
    idle_rss_bytes: int | None = None
    idle_rss_by_process: list[dict] = field(default_factory=list)
    peak_rss_bytes: int | None = None
    sampled_peak_rss_bytes: int | None = None
    client_cpu_utilisation: float | None = None
    server_command: list[str] = field(default_factory=list)
    wrk_command: list[str] = field(default_factory=list)
    wall_time_s: float = 0.0
    server_log_tail: str = ""
    # What the app itself counted during the measured window, per request (the catalog's query
    # counter: queries, ms in the database, building and encoding the JSON); empty for other apps.
    app_per_request: dict[str, float] = field(default_factory=dict)
    # The websocket group's idle scenarios: the RSS the server grew by per connection held open,
    # how many were held, and how many of them negotiated permessage-deflate.
    rss_per_connection_bytes: float | None = None
    ws_connections: int = 0
    ws_deflated: int = 0
    # The http2 group: everything h2load counted (protocol, started, done, succeeded, failed,
    # errored, timeout, the status classes, the requests in its log); empty for other loads.
    h2load_counts: dict = field(default_factory=dict)
    # Idle scenarios: the connections held while the RSS was read.
    idle_connections: int = 0
    # The http3 group: h3-load's whole report: the connections, answers by status, errors by kind,
    # bytes, latency, quinn's counts, and for the handshakes scenarios the late starts and the
    # normal client's counts and latency; empty for other loads.
    h3load_counts: dict = field(default_factory=dict)

    def take_wrk(self, result: WrkResult | H2loadResult | H3loadResult, scenario: Scenario) -> None:
        self.requests = result.requests
        self.duration_s = result.duration_s
        self.requests_per_second = result.requests_per_second
        if scenario.reports_latency:
            for percent in ("p50", "p75", "p90", "p99"):
                setattr(self, f"{percent}_ms", result.latency_ms.get(percent))
        self.socket_errors = dict(result.socket_errors)
        self.non_2xx_3xx = result.non_2xx_3xx
        if isinstance(result, H2loadResult):
            self.h2load_counts = result.counts()
        if isinstance(result, H3loadResult):
            self.h3load_counts = result.counts()


def wrk_failure(result: WrkResult | H2loadResult | H3loadResult, scenario: Scenario) -> str | None:
    """Why a wrk report (or h2load's, judged by `benches.h2load.h2load_failure`, or h3-load's, by
    `benches.h3load.h3load_failure`) does not count for ``scenario`` (None when it does)."""
    if isinstance(result, H2loadResult):
        return h2load_failure(result, scenario)
    if isinstance(result, H3loadResult):
        return h3load_failure(result, scenario)
    if result.requests == 0:
        return "no request completed"
    if result.socket_error_total:
        details = ", ".join(f"{kind} {count}" for kind, count in result.socket_errors.items() if count)
        return f"socket errors: {details}"
    if scenario.expect.is_error_status:
        if result.non_2xx_3xx != result.requests:
            return (
                f"{result.requests - result.non_2xx_3xx} of {result.requests} responses had a status below 400, "
                f"expected {scenario.expect.status} for all"
            )
    elif result.non_2xx_3xx and scenario.websocket:
        return f"{result.non_2xx_3xx} wrong or missed messages"
    elif result.non_2xx_3xx:
        return f"{result.non_2xx_3xx} of {result.requests} responses had a status >= 400"
    if scenario.reports_latency:
        return latency_problem(result.latency_ms)
    return None


def latency_problem(latency_ms: dict[str, float]) -> str | None:
    """Why wrk's latency percentiles cannot be trusted (None when they can): missing ones, or
    zeros and decreasing values, which wrk prints when its distribution went wrong."""
    missing = [percent for percent in ("p50", "p90", "p99") if percent not in latency_ms]
    if missing:
        return f"wrk printed no {', '.join(missing)} latency"
    ordered = [latency_ms[percent] for percent in sorted(latency_ms, key=lambda name: float(name[1:]))]
    if min(ordered) <= 0 or ordered != sorted(ordered):
        return f"wrk's latency distribution is inconsistent: {latency_ms}"
    return None


@dataclass
class Summary:
    """The repeats of one server on one scenario, reduced to medians (when all counted)."""

    scenario: str
    server: str
    runs: int
    ok_runs: int
    medians: dict[str, float] = field(default_factory=dict)
    rps_min: float | None = None
    rps_max: float | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.runs > 0 and self.ok_runs == self.runs

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def median_or_none(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def summarise(runs: list[RunRecord]) -> list[Summary]:
    """One Summary per (scenario, server), in the order the pairs first appear in ``runs``."""
    grouped: dict[tuple[str, str], list[RunRecord]] = {}
    for run in runs:
        grouped.setdefault((run.scenario, run.server), []).append(run)
    summaries = []
    for (scenario, server), pair_runs in grouped.items():
        good = [run for run in pair_runs if run.ok]
        summary = Summary(scenario=scenario, server=server, runs=len(pair_runs), ok_runs=len(good))
        summary.failures = [f"run {run.repeat}: {run.failure}" for run in pair_runs if not run.ok]
        if summary.ok:
            for metric in MEDIAN_METRICS:
                value = median_or_none([getattr(run, metric) for run in good])
                if value is not None:
                    summary.medians[metric] = value
            rates = [run.requests_per_second for run in good if run.requests_per_second is not None]
            if rates:  # none for the idle scenarios, which measure memory
                summary.rps_min, summary.rps_max = min(rates), max(rates)
        summaries.append(summary)
    return summaries


def write_results(path: Path, document: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")
    return path


def results_document(
    *,
    environment: dict,
    settings: dict,
    scenarios: list[Scenario],
    servers: dict[str, dict],
    runs: list[RunRecord],
) -> dict:
    """The whole results file: how it was measured, every raw run, and the summaries."""
    return {
        "environment": environment,
        "settings": settings,
        "scenarios": [
            {**asdict(scenario), "expect": {**asdict(scenario.expect), "body": _text(scenario.expect.body)}}
            for scenario in scenarios
        ],
        "servers": servers,
        "runs": [asdict(run) for run in runs],
        "summaries": [summary.to_dict() for summary in summarise(runs)],
    }


def _text(body: bytes | None) -> str | None:
    return None if body is None else body.decode("utf-8", errors="replace")


def load_results(path: Path) -> dict:
    return json.loads(path.read_text())
