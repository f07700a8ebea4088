"""h3-load, the http3 group's load generator (benches/rust/src/bin/h3-load.rs): its command line,
its report, and the HTTP/3 checks made with it.

Debian's h2load has no HTTP/3, so the http3 group drives HTTP/3 with h3-load, built with the Rust
peers from quinn, h3 and h3-quinn. It verifies the server's certificate against the suite's own
(benches/tls.py), offers ALPN ``h3`` only and refuses a connection that did not agree on it. Its
three timed loads:

- ``h3-load``: ``-c`` connections with ``-m`` requests in flight on each, as h2load's ``-c``/``-m``;
- ``h3-handshakes``: a new QUIC connection for every request (closed loop over ``-c`` slots, or
  with ``--rate`` in the scenario's ``wrk_args`` an open loop of that many connections a second),
  with a *normal client* beside it that opens a connection and asks one GET every 20 ms: its
  latency is the row's p50/p90/p99 (the flood's own counts stay in the results JSON); a timeout
  of it, or a request still unanswered at the end, counts as the time it waited (a lower bound),
  a wrong answer or a failed handshake of it refuses the run;
- ``h3-idle``: connections held idle while the runner reads the server's RSS, in the line
  protocol of benches/h2idle.py (the runner drives it as it drives h2idle).

h3-load judges every answer (status, and body length where the scenario knows it) and exits 1
with ``"valid": false`` when any was wrong or any request failed; the runner then records the run
as failed with h3-load's reason. `check_h3_scenario` runs ``h3-load --check``: the scenario's
request three times on one connection, each answer printed whole and judged here like an HTTP/1.1
or HTTP/2 answer (`benches.httpcheck.response_problems`).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from benches.rust_peers import RUST_BIN_DIR
from benches.scenarios import Scenario
from benches.tls import CERTFILE

H3_LOAD = RUST_BIN_DIR / "h3-load"
# A request (or handshake) unanswered for this long fails the run: h2load's -N 5s counterpart.
TIMEOUT_S = 5
# How often the handshakes scenarios' normal client arrives (a new connection and one GET).
PROBE_INTERVAL_MS = 20
# Requests of a check, on one connection: the first alone, then the others together.
CHECK_REQUESTS = 3
H3_LOADS = ("h3-load", "h3-handshakes", "h3-idle")


class H3CheckFailed(Exception):
    """h3-load's check found no answer, or a wrong one."""


@dataclass
class H3loadResult:
    """h3-load's report; the fields the runner reads from wrk's reports, and everything it counted."""

    requests: int
    duration_s: float
    requests_per_second: float
    latency_ms: dict[str, float] = field(default_factory=dict)
    socket_errors: dict[str, int] = field(default_factory=dict)
    non_2xx_3xx: int = 0
    transfer_bytes: float = 0.0
    valid: bool = False
    report: dict = field(default_factory=dict)

    @property
    def socket_error_total(self) -> int:
        return sum(self.socket_errors.values())

    def counts(self) -> dict:
        """Everything h3-load reported, for the results JSON (a handshakes row's record keeps the
        normal client's latency; the flood's is here)."""
        return dict(self.report)


def base_url(url: str) -> str:
    """The runner's base URL (``http://H:P``, as it builds it for every scenario) over https."""
    return "https://" + url.split("://", 1)[-1].rstrip("/")


def common_arguments(scenario: Scenario) -> list[str]:
    argv = [str(H3_LOAD), "--ca", str(CERTFILE), "--timeout", str(TIMEOUT_S)]
    argv += ["--expect-status", str(scenario.expect.status)]
    if scenario.expect.body is not None:
        argv += ["--expect-length", str(len(scenario.expect.body))]
    elif scenario.expect.body_length is not None:
        argv += ["--expect-length", str(scenario.expect.body_length)]
    for name, value in scenario.headers:
        argv += ["-H", f"{name}: {value}"]
    return argv


def h3load_command(scenario: Scenario, url: str, duration_s: float) -> list[str]:
    """h3-load for ``scenario`` against ``url`` (base URL without path) for ``duration_s`` seconds
    (its own warm-up off: the runner warms up with a run of its own, as with h2load)."""
    argv = common_arguments(scenario)
    if scenario.load == "h3-idle":
        return [*argv, "--idle", str(scenario.connections), base_url(url) + scenario.path]
    if scenario.load == "h3-handshakes":
        argv += ["--handshakes", "--probe-interval", str(PROBE_INTERVAL_MS)]
    else:
        argv += ["-m", str(scenario.streams)]
    argv += ["-c", str(scenario.connections), "-D", f"{max(duration_s, 0.1):g}", "--warm-up", "0"]
    return [*argv, *scenario.wrk_args, base_url(url) + scenario.path]


def parse_h3load_output(output: str, scenario: Scenario) -> H3loadResult:
    """h3-load's JSON report. Raises ValueError without one. For the handshakes scenarios the
    latency is the normal client's (see the module's docstring)."""
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if not lines:
        raise ValueError(f"no h3-load report found ({' | '.join(output.strip().splitlines()[:3]) or 'no output'})")
    report = json.loads(lines[-1])
    latency = report.get("latency_ms", {})
    if scenario.load == "h3-handshakes":
        latency = report.get("probe", {}).get("latency_ms", {})
    errors = {kind: int(count) for kind, count in report.get("errors", {}).items()}
    return H3loadResult(
        requests=int(report.get("requests", 0)),
        duration_s=float(report.get("duration_s", 0.0)),
        requests_per_second=float(report.get("requests_per_second") or 0.0),
        latency_ms={percent: float(latency[percent]) for percent in ("p50", "p75", "p90", "p99") if percent in latency},
        socket_errors=errors,
        non_2xx_3xx=int(report.get("wrong_status", 0)),
        transfer_bytes=float(report.get("bytes", 0)),
        valid=bool(report.get("valid")),
        report=report,
    )


def h3load_failure(result: H3loadResult, scenario: Scenario) -> str | None:
    """Why an h3-load report does not count for ``scenario`` (None when it does)."""
    report = result.report
    problems = []
    if result.requests == 0:
        problems.append("no request completed")
    if result.socket_error_total:
        problems.append("errors " + ", ".join(f"{count} {kind}" for kind, count in result.socket_errors.items()))
    if report.get("wrong_status"):
        problems.append(f"{report['wrong_status']} answers with a status other than {scenario.expect.status}")
    if report.get("wrong_length"):
        problems.append(f"{report['wrong_length']} bodies of the wrong length")
    probe = report.get("probe") or {}
    if probe.get("failed"):
        problems.append(f"{probe['failed']} of the normal client's requests failed")
    waits = sum(int(probe.get(kind, 0)) for kind in ("requests", "timeouts", "unfinished"))
    if scenario.load == "h3-handshakes" and not waits:
        problems.append("the normal client made no request")
    if not problems and not result.valid:
        problems.append("the report says it is not valid")
    if problems:
        return f"h3-load: {'; '.join(problems)} of {result.requests} requests"
    if scenario.reports_latency and len(result.latency_ms) < 4:
        return "h3-load reported no latency percentiles"
    return None


def check_command(scenario: Scenario, host: str, port: int, requests: int = CHECK_REQUESTS) -> list[str]:
    argv = [str(H3_LOAD), "--ca", str(CERTFILE), "--timeout", str(TIMEOUT_S), "--check", str(requests)]
    for name, value in scenario.headers:
        argv += ["-H", f"{name}: {value}"]
    return [*argv, f"https://{host}:{port}{scenario.path}"]


def h3_answers(scenario: Scenario, host: str, port: int, requests: int = CHECK_REQUESTS) -> list[dict]:
    """The answers of ``h3-load --check``: dicts of status, headers, length and body (bytes).
    Raises H3CheckFailed when a request got no answer."""
    argv = check_command(scenario, host, port, requests)
    try:
        completed = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S * 3, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise H3CheckFailed(f"{Path(argv[0]).name}: {error}") from error
    answers = []
    for line in completed.stdout.splitlines():
        if not line.startswith("{"):
            continue
        answer = json.loads(line)
        if "error" in answer:
            raise H3CheckFailed(f"{scenario.method} {scenario.path} over HTTP/3: {answer['error']}")
        answer["body"] = bytes.fromhex(answer.pop("body_hex"))
        answers.append(answer)
    if completed.returncode != 0 or len(answers) != requests:
        last = (completed.stderr.strip().splitlines() or ["no answer"])[-1]
        raise H3CheckFailed(f"{scenario.method} {scenario.path} over HTTP/3: {len(answers)} answers; {last}")
    return answers
