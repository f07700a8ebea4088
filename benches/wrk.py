"""wrk, the load generator: building its command line from a scenario, and parsing its report.

wrk (``wrk --latency``) prints a human-readable report; `parse_wrk_output`
turns it into a `WrkResult` with requests/sec, the latency percentiles it
prints (50/75/90/99), socket errors and the "Non-2xx or 3xx responses"
count (wrk counts every status >= 400 there). Durations in the report carry
units (``us``, ``ms``, ``s``, ``m``, ``h``) which are converted to
milliseconds; sizes (``B``, ``KB``, ``MB``, ``GB``) to bytes.

Pipelining uses benches/lua/pipeline.lua, which sends ``pipeline`` copies of
the request per write (the script gets the depth after ``--``). A scenario
whose path is an ``http://`` URL goes through a forward proxy: wrk connects
to the proxy and benches/lua/proxy.lua sends that absolute-form target.

The other load generators are dispatched from here too, so the runner has one
entry point: benches/tunnel_load.py, benches/rust's ws-load, the idle holders
(benches/wsclient.py, benches/h2idle.py), h2load (benches/h2load.py) and benches/rust's
h3-load (benches/h3load.py).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benches import BENCHES_DIR
from benches.h2load import H2loadError, H2loadResult, h2load_command, parse_h2load_output, read_request_log
from benches.h3load import H3loadResult, h3load_command, parse_h3load_output
from benches.scenarios import Scenario

PIPELINE_SCRIPT = BENCHES_DIR / "lua" / "pipeline.lua"
# Absolute-form requests through a forward proxy (scenarios whose path is an http:// URL).
PROXY_SCRIPT = BENCHES_DIR / "lua" / "proxy.lua"
# CONNECT tunnels, which wrk cannot open (scenarios with load="tunnel"); prints a wrk-style report.
TUNNEL_LOAD = BENCHES_DIR / "tunnel_load.py"
# The websocket group's load generator (benches/rust/src/bin/ws-load.rs, built with the Rust peers).
WS_LOAD = BENCHES_DIR / "rust" / "target" / "release" / "ws-load"
# Seconds ws-load waits for any one read or write before counting a timeout.
WS_TIMEOUT_S = 5
# Where h2load's request log goes in the commands the README shows (the runner names a file per run).
H2LOAD_LOG = "REQUESTS.tsv"
# A request slower than this counts as a wrk "timeout" socket error; wrk's default is 2 s.
WRK_TIMEOUT = "5s"

_TIME_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}
_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"


class WrkError(ValueError):
    """wrk failed, or its output did not contain a report."""


@dataclass
class WrkResult:
    requests: int
    duration_s: float
    requests_per_second: float
    latency_ms: dict[str, float] = field(default_factory=dict)  # "p50" -> milliseconds
    socket_errors: dict[str, int] = field(default_factory=dict)  # connect/read/write/timeout -> count
    non_2xx_3xx: int = 0
    transfer_bytes: float = 0.0

    @property
    def socket_error_total(self) -> int:
        return sum(self.socket_errors.values())

    def to_dict(self) -> dict:
        return asdict(self)


def duration_to_ms(text: str) -> float:
    """``"635.91us"`` -> 0.63591; ``"1.20ms"`` -> 1.2; ``"2.00s"`` -> 2000.0; ``"1.50m"`` -> 90000.0."""
    match = re.fullmatch(_NUMBER + r"(us|ms|s|m|h)", text.strip())
    if not match:
        raise WrkError(f"not a wrk duration: {text!r}")
    return float(match.group(1)) * _TIME_UNITS_MS[match.group(2)]


def size_to_bytes(text: str) -> float:
    """``"68.51MB"`` -> 71838351.36; ``"512.00B"`` -> 512.0."""
    match = re.fullmatch(_NUMBER + r"(B|KB|MB|GB|TB)", text.strip())
    if not match:
        raise WrkError(f"not a wrk size: {text!r}")
    return float(match.group(1)) * _SIZE_UNITS[match.group(2)]


def parse_latency_distribution(output: str) -> dict[str, float]:
    """The lines under "Latency Distribution" (``     99%    5.80ms``) as {"p99": 5.8, ...} in ms."""
    latency: dict[str, float] = {}
    lines = iter(output.splitlines())
    for line in lines:
        if line.strip() == "Latency Distribution":
            break
    for line in lines:
        match = re.fullmatch(r"\s*" + _NUMBER + r"%\s+(\S+)\s*", line)
        if not match:
            break
        latency[f"p{float(match.group(1)):g}"] = duration_to_ms(match.group(2))
    return latency


def parse_wrk_output(output: str) -> WrkResult:
    """Parses the report of ``wrk --latency``. Raises WrkError when there is no report."""
    rps_match = re.search(r"^Requests/sec:\s*" + _NUMBER, output, re.MULTILINE)
    total_match = re.search(r"^\s*([0-9]+) requests in ([0-9.]+(?:us|ms|s|m|h)),\s*(\S+) read", output, re.MULTILINE)
    if not rps_match or not total_match:
        first_lines = " | ".join(output.strip().splitlines()[:3]) or "no output"
        raise WrkError(f"no wrk report found ({first_lines})")

    latency = parse_latency_distribution(output)

    socket_errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    errors_match = re.search(
        r"Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)", output
    )
    if errors_match:
        socket_errors = dict(zip(socket_errors, map(int, errors_match.groups()), strict=True))

    non_2xx_match = re.search(r"Non-2xx or 3xx responses: ([0-9]+)", output)
    return WrkResult(
        requests=int(total_match.group(1)),
        duration_s=duration_to_ms(total_match.group(2)) / 1000.0,
        requests_per_second=float(rps_match.group(1)),
        latency_ms=latency,
        socket_errors=socket_errors,
        non_2xx_3xx=int(non_2xx_match.group(1)) if non_2xx_match else 0,
        transfer_bytes=size_to_bytes(total_match.group(3)),
    )


def wrk_command(
    scenario: Scenario, url: str, duration_s: float, wrk: str = "wrk", log_file: str | Path = H2LOAD_LOG
) -> list[str]:
    """The wrk argv for ``scenario`` against ``url`` (base URL without path) for ``duration_s`` seconds
    (for a tunnel scenario, the argv of benches/tunnel_load.py, which reports as wrk does; for the
    http2 group's, h2load's, with its request log written to ``log_file``)."""
    if scenario.load.startswith("h2load"):
        return h2load_command(scenario, url, duration_s, log_file)
    if scenario.http3:
        return h3load_command(scenario, url, duration_s)
    if scenario.load == "h2-idle":
        return h2_idle_command(scenario, url)
    if scenario.load == "tunnel":
        return tunnel_command(scenario, url, duration_s)
    if scenario.load == "websocket":
        return ws_load_command(scenario, url, duration_s)
    if scenario.load == "ws-idle":
        return ws_idle_command(scenario, url)
    argv = [
        wrk,
        f"-t{scenario.threads}",
        f"-c{scenario.connections}",
        f"-d{max(1, round(duration_s))}s",
        "--timeout",
        WRK_TIMEOUT,
        "--latency",
    ]
    for name, value in scenario.headers:
        argv += ["-H", f"{name}: {value}"]
    argv += list(scenario.wrk_args)
    if scenario.path.startswith("http://"):
        # wrk connects to the proxy at ``url`` and asks it for the absolute target.
        argv += ["-s", str(PROXY_SCRIPT), url.rstrip("/") + "/", "--", scenario.path, str(scenario.pipeline)]
        return argv
    if scenario.script:
        argv += ["-s", str(BENCHES_DIR / "lua" / scenario.script)]
    elif scenario.pipeline > 1:
        argv += ["-s", str(PIPELINE_SCRIPT)]
    argv.append(url.rstrip("/") + scenario.path)
    if scenario.script:
        argv += ["--", *scenario.script_args]
    elif scenario.pipeline > 1:
        argv += ["--", str(scenario.pipeline)]
    return argv


def tunnel_command(scenario: Scenario, url: str, duration_s: float, check: bool = False) -> list[str]:
    """benches/tunnel_load.py through the proxy at ``url`` to the scenario's absolute target."""
    proxy = url.split("://", 1)[-1].rstrip("/")
    argv = [sys.executable, str(TUNNEL_LOAD), "--proxy", proxy, "--target", scenario.path]
    if scenario.expect.body_sha256:
        argv += ["--sha256", scenario.expect.body_sha256]
    if check:
        return [*argv, "--check"]
    return [*argv, "--connections", str(scenario.connections), "--duration", f"{duration_s:g}", *scenario.wrk_args]


def ws_url(url: str, path: str) -> str:
    """``http://H:P`` and ``/echo`` -> ``ws://H:P/echo``."""
    return "ws://" + url.split("://", 1)[-1].rstrip("/") + path


def ws_load_command(scenario: Scenario, url: str, duration_s: float) -> list[str]:
    """ws-load against the scenario's endpoint: its own warm-up is off (the runner warms up with
    a run of its own, as with wrk)."""
    return [
        str(WS_LOAD),
        "--url",
        ws_url(url, scenario.path),
        "--mode",
        scenario.ws_mode,
        "--connections",
        str(scenario.connections),
        "--size",
        str(scenario.message_size),
        "--duration",
        f"{duration_s:g}",
        "--warmup",
        "0",
        "--timeout",
        str(WS_TIMEOUT_S),
        *scenario.wrk_args,
    ]


def ws_idle_command(scenario: Scenario, url: str) -> list[str]:
    """benches/wsclient.py holding the scenario's idle connections (the runner drives it)."""
    argv = [sys.executable, "-m", "benches.wsclient", "idle", "--url", ws_url(url, scenario.path)]
    argv += ["--connections", str(scenario.connections)]
    return [*argv, "--deflate"] if scenario.deflate else argv


def h2_idle_command(scenario: Scenario, url: str) -> list[str]:
    """benches/h2idle.py holding the scenario's idle h2c connections (the runner drives it)."""
    argv = [sys.executable, "-m", "benches.h2idle", "--url", url.rstrip("/") + scenario.path]
    argv += ["--connections", str(scenario.connections), "--status", str(scenario.expect.status)]
    if scenario.expect.body is not None:
        argv += ["--sha256", hashlib.sha256(scenario.expect.body).hexdigest()]
    elif scenario.expect.body_sha256:
        argv += ["--sha256", scenario.expect.body_sha256]
    return argv


def parse_ws_load_output(output: str) -> WrkResult:
    """ws-load's JSON report as a `WrkResult`: messages (deliveries, for a broadcast) as requests,
    wrong and missed answers as error responses, closed connections as read errors. Raises
    WrkError without a report, or when it reports no throughput (it never does for wrong answers)."""
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if not lines:
        raise WrkError(f"no ws-load report found ({' | '.join(output.strip().splitlines()[:3]) or 'no output'})")
    try:
        report = json.loads(lines[-1])
    except ValueError as error:
        raise WrkError(f"ws-load's report is not JSON: {error}") from error
    errors = report.get("errors", {})
    if report.get("messages_per_second") is None:
        raise WrkError(f"ws-load reported no throughput: errors {errors}")
    latency = report.get("latency_ms", {})
    return WrkResult(
        requests=int(report["messages"]),
        duration_s=float(report["duration_s"]),
        requests_per_second=float(report["messages_per_second"]),
        latency_ms={percent: float(latency[percent]) for percent in ("p50", "p75", "p90", "p99") if percent in latency},
        socket_errors={
            "connect": int(errors.get("connect", 0)),
            "read": int(errors.get("read", 0)) + int(errors.get("closed", 0)),
            "write": int(errors.get("write", 0)),
            "timeout": int(errors.get("timeout", 0)),
        },
        non_2xx_3xx=int(errors.get("wrong", 0)) + int(errors.get("missed", 0)),
        transfer_bytes=float(report.get("bytes", 0)),
    )


def parse_load_output(
    scenario: Scenario, output: str, log_file: Path | None = None
) -> WrkResult | H2loadResult | H3loadResult:
    """The report of whichever load generator the scenario uses (h2load's with the latency of its
    request log ``log_file``, when given)."""
    if scenario.http3:
        try:
            return parse_h3load_output(output, scenario)
        except (ValueError, KeyError) as error:
            raise WrkError(str(error)) from error
    if scenario.load.startswith("h2load"):
        try:
            result = parse_h2load_output(output)
            if log_file is not None:
                read_request_log(result, log_file)
        except (H2loadError, OSError, ValueError) as error:
            raise WrkError(str(error)) from error
        return result
    return parse_ws_load_output(output) if scenario.load == "websocket" else parse_wrk_output(output)


def readable_command(argv: list[str]) -> str:
    """A wrk argv as written in the README: shell-quoted, paths relative to the repository."""
    text = shlex.join(argv)
    return text.replace(str(BENCHES_DIR.parent) + "/", "")
