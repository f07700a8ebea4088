"""h2load, the http2 group's load generator (Debian's nghttp2-client): its command line, its report.

wrk speaks only HTTP/1.1, so the http2 group drives its servers with h2load:
h2c with prior knowledge (an ``http://`` URL; h2load sends the connection
preface at once), ``-c`` connections, each with ``-m`` streams in flight, for
``-D`` seconds, on one thread pinned to the load generator's core like wrk.
The group's HTTP/1.1 twins use the same h2load with ``--h1`` (and one request
in flight per connection, since ``-m`` above 1 would pipeline), so "over h2"
and "over HTTP/1.1" come from one client and one run of the suite.

`parse_h2load_output` turns h2load's report into an `H2loadResult`, a
`benches.wrk.WrkResult` (so the runner, results, report and charts treat it
as they treat wrk's) that also keeps what h2load counts and wrk does not:
requests started, done, succeeded, failed (h2load counts every status >= 400
as failed) and errored (reset or broken streams), timeouts, and the status
classes. h2load prints no percentiles, so the latency percentiles come from
its ``--log-file``, one line per request (start, status, microseconds to the
end of the response): `read_request_log` reads it.

`h2load_failure` says why a report does not count: no request done, any
failed, errored or timed-out request, any status outside the expected class,
or a protocol other than the one asked (h2load reports what it negotiated).
A seed once published 142,800 errors as throughput; here they refuse the row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from benches.scenarios import Scenario

# A connection with no activity for this long is dropped by h2load and its requests count as
# errors: the counterpart of wrk's --timeout, so a stalled stream cannot hide in the in-flight ones.
INACTIVITY_TIMEOUT = "5s"
# What h2load prints as "Application protocol" for each kind of scenario (the "-tls" ones: the
# http3 group's rows over TLS, where ALPN chooses).
PROTOCOLS = {"h2load": "h2c", "h2load-h1": "http/1.1", "h2load-tls": "h2", "h2load-tls-h1": "http/1.1"}
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")
LATENCY_PERCENTILES = (50, 75, 90, 99)

_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"
_TIME_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}


class H2loadError(ValueError):
    """h2load's output holds no report."""


@dataclass
class H2loadResult:
    """h2load's counts; `as_wrk_result` gives the runner the fields it reads from wrk's reports."""

    requests: int
    duration_s: float
    requests_per_second: float
    started: int = 0
    done: int = 0
    succeeded: int = 0
    failed: int = 0
    errored: int = 0
    timeouts: int = 0
    statuses: dict[str, int] = field(default_factory=dict)  # "2xx" -> count
    protocol: str = ""
    transfer_bytes: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    # From the request log: statuses as h2load logged them (-1 for a failed stream) and how many lines.
    logged_statuses: dict[int, int] = field(default_factory=dict)
    logged_requests: int = 0
    log_read: bool = False

    @property
    def socket_errors(self) -> dict[str, int]:
        """wrk's socket-error slot: h2load's broken streams and connections, and its timeouts."""
        return {"errored": self.errored, "timeout": self.timeouts}

    @property
    def socket_error_total(self) -> int:
        return self.errored + self.timeouts

    @property
    def non_2xx_3xx(self) -> int:
        """What wrk would count as "Non-2xx or 3xx responses"."""
        return self.statuses.get("4xx", 0) + self.statuses.get("5xx", 0)

    def counts(self) -> dict[str, int | str]:
        """Everything h2load counted, for the results JSON."""
        return {
            "protocol": self.protocol,
            "started": self.started,
            "done": self.done,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "errored": self.errored,
            "timeout": self.timeouts,
            **self.statuses,
            "logged": self.logged_requests,
        }


def duration_to_ms(text: str) -> float:
    """``"785us"`` -> 0.785; ``"1.01s"`` -> 1010.0 (h2load's units: us, ms, s, m, h)."""
    match = re.fullmatch(_NUMBER + r"(us|ms|s|m|h)", text.strip())
    if not match:
        raise H2loadError(f"not an h2load duration: {text!r}")
    return float(match.group(1)) * _TIME_UNITS_MS[match.group(2)]


def parse_h2load_output(output: str) -> H2loadResult:
    """The report h2load prints at the end of a run. Raises H2loadError without one."""
    finished = re.search(r"^finished in (\S+), " + _NUMBER + r" req/s", output, re.MULTILINE)
    requests = re.search(
        r"^requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, "
        r"(\d+) timeout",
        output,
        re.MULTILINE,
    )
    statuses = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", output, re.MULTILINE)
    if not finished or not requests or not statuses:
        first_lines = " | ".join(output.strip().splitlines()[:3]) or "no output"
        raise H2loadError(f"no h2load report found ({first_lines})")
    _total, started, done, succeeded, failed, errored, timeouts = map(int, requests.groups())
    protocol = re.search(r"^Application protocol: (\S+)", output, re.MULTILINE)
    traffic = re.search(r"^traffic: \S+ \((\d+)\) total", output, re.MULTILINE)
    return H2loadResult(
        requests=done,
        duration_s=duration_to_ms(finished.group(1)) / 1000.0,
        requests_per_second=float(finished.group(2)),
        started=started,
        done=done,
        succeeded=succeeded,
        failed=failed,
        errored=errored,
        timeouts=timeouts,
        statuses=dict(zip(STATUS_CLASSES, map(int, statuses.groups()), strict=True)),
        protocol=protocol.group(1) if protocol else "",
        transfer_bytes=int(traffic.group(1)) if traffic else 0,
    )


def read_request_log(result: H2loadResult, log_file: Path) -> None:
    """Adds the latency percentiles (nearest rank, ms) and the logged statuses of ``log_file``
    (h2load's ``--log-file``: start µs, status, µs to the end of the response) to ``result``."""
    durations: list[int] = []
    statuses: dict[int, int] = {}
    with log_file.open() as lines:
        for line in lines:
            parts = line.split("\t")
            if len(parts) < 3:
                continue
            status = int(parts[1])
            statuses[status] = statuses.get(status, 0) + 1
            durations.append(int(parts[2]))
    result.logged_statuses = statuses
    result.logged_requests = len(durations)
    result.log_read = True
    if not durations:
        return
    durations.sort()
    for percent in LATENCY_PERCENTILES:
        rank = max(1, -(-percent * len(durations) // 100))  # the ceiling of percent% of the count
        result.latency_ms[f"p{percent}"] = durations[rank - 1] / 1000.0


def h2load_command(scenario: Scenario, url: str, duration_s: float, log_file: str | Path | None = None) -> list[str]:
    """h2load for ``scenario`` against ``url`` (base URL without path) for ``duration_s`` seconds;
    ``log_file`` receives a line per request (the latency percentiles come from it)."""
    argv = [
        "h2load",
        "-t1",
        f"-c{scenario.connections}",
        f"-m{scenario.streams}",
        f"-D{max(1, round(duration_s * 1000))}ms",
        "-N",
        INACTIVITY_TIMEOUT,
    ]
    if scenario.load.endswith("-h1"):
        argv.append("--h1")
    for name, value in scenario.headers:
        argv += ["-H", f"{name}: {value}"]
    if log_file is not None:
        argv += ["--log-file", str(log_file)]
    argv.append(url.rstrip("/") + scenario.path)
    # After the URL: more URIs are asked in turn on the first one's connections (h2load ignores
    # their scheme, host and port), and options still parse there.
    return argv + list(scenario.wrk_args)


def h2load_failure(result: H2loadResult, scenario: Scenario) -> str | None:
    """Why an h2load report does not count for ``scenario`` (None when it does)."""
    expected_protocol = PROTOCOLS.get(scenario.load)
    if result.done == 0:
        return f"no request completed (protocol {result.protocol or 'none'} negotiated)"
    if expected_protocol and result.protocol != expected_protocol:
        return f"h2load spoke {result.protocol or 'nothing'}, expected {expected_protocol}"
    problems = []
    expected_class = f"{scenario.expect.status // 100}xx"
    if result.errored or result.timeouts:
        problems.append(f"{result.errored} errored and {result.timeouts} timed-out requests")
    # h2load counts a status >= 400 as failed (and "done" is succeeded plus failed): for a scenario
    # expecting success nothing may fail, for one expecting an error status nothing may succeed.
    if scenario.expect.is_error_status:
        if result.succeeded:
            problems.append(f"{result.succeeded} requests succeeded, expected status {scenario.expect.status}")
    elif result.failed or result.succeeded != result.done:
        problems.append(f"{result.failed} failed requests")
    # The status classes count every response whose head arrived, also those still in flight at
    # the end (not "done"): any status outside the expected class refuses the run.
    unexpected = {name: count for name, count in result.statuses.items() if count and name != expected_class}
    if unexpected:
        problems.append("statuses " + ", ".join(f"{count} {name}" for name, count in unexpected.items()))
    if result.statuses.get(expected_class, 0) < result.done - result.errored - result.timeouts:
        problems.append(f"only {result.statuses.get(expected_class, 0)} responses with a {expected_class} status")
    wrong_logged = {
        status: count
        for status, count in result.logged_statuses.items()
        if status // 100 != scenario.expect.status // 100
    }
    if wrong_logged:
        problems.append(
            "request log: " + ", ".join(f"{count} with status {status}" for status, count in wrong_logged.items())
        )
    # h2load logs every request it counts as done: a log that disagrees was not this run's.
    if result.log_read and result.logged_requests != result.done:
        problems.append(f"its request log holds {result.logged_requests} requests")
    if problems:
        return f"h2load: {'; '.join(problems)} of {result.done} requests done"
    if scenario.reports_latency and result.logged_requests and len(result.latency_ms) < len(LATENCY_PERCENTILES):
        return "h2load's request log gave no latency percentiles"
    return None
