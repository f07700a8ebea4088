"""Tests of the benchmark suite itself (benches/), not of rush's speed.

They need neither wrk, nor the bench virtualenv, nor the network: wrk's
output is given as samples, servers are replaced by canned responses on a
loopback socket, and the README writer works on strings. The slow measuring
stays out of `make test`.
"""

from __future__ import annotations

import contextlib
import json
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

# `python -m pytest` (as `make test` runs it) puts the repository root on sys.path, the `pytest`
# script does not; benches/ is a directory of the repository, not an installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benches import REPO_ROOT
from benches.apps.site import LARGE_FILE, SMALL_FILE, ensure_site, sha256, site_files, text_of_size
from benches.cli import complete_groups
from benches.h2load import H2loadError, h2load_failure, parse_h2load_output
from benches.httpcheck import CheckFailed, check_h2_scenario, check_scenario, media_type_matches, request_bytes
from benches.nginx import render_config, write_config
from benches.processes import ServerProcess, cpu_seconds, memory_bytes, process_tree
from benches.report import (
    NOT_MEASURED,
    headline_rows,
    merge_into_latest,
    render_group,
    render_headline,
    render_readme,
    replace_section,
)
from benches.results import RunRecord, latency_problem, results_document, summarise, wrk_failure
from benches.runner import PlannedRun, Settings, measure, needed_open_files, plan, raise_open_file_limit
from benches.rust_peers import RUST_DIR, build_command, locked_version
from benches.scenarios import GROUPS, RUSH_ALONE, Expectation, Scenario, all_scenarios, select_scenarios
from benches.servers import SERVERS, Launch, Server, select_servers
from benches.wrk import (
    PIPELINE_SCRIPT,
    WS_LOAD,
    WrkError,
    WrkResult,
    duration_to_ms,
    parse_load_output,
    parse_wrk_output,
    parse_ws_load_output,
    size_to_bytes,
    wrk_command,
    ws_load_command,
)

WRK_CLEAN = """\
Running 10s test @ http://127.0.0.1:8000/
  1 threads and 100 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   635.91us    0.89ms  12.92ms   93.69%
    Req/Sec    56.20k     8.07k   62.00k    86.54%
  Latency Distribution
     50%  250.00us
     75%  491.00us
     90%  700.00us
     99%    5.80ms
  561200 requests in 10.01s, 68.51MB read
Requests/sec:  56068.04
Transfer/sec:      6.84MB
"""

WRK_WITH_ERRORS = """\
Running 5s test @ http://127.0.0.1:8000/no/such/page
  1 threads and 100 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.20s   300.00ms   2.00s    70.00%
    Req/Sec     1.10k   200.00     1.50k    60.00%
  Latency Distribution
     50%    1.10s
     75%    1.30s
     90%    1.50s
     99%    1.90s
  5500 requests in 5.00s, 1.01MB read
  Socket errors: connect 0, read 12, write 3, timeout 7
  Non-2xx or 3xx responses: 5500
Requests/sec:   1100.00
Transfer/sec:    206.00KB
"""

WRK_PIPELINED_BROKEN_LATENCY = """\
Running 2s test @ http://127.0.0.1:8000/
  1 threads and 100 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    26.96ms   20.90ms 157.07ms   25.37%
    Req/Sec    26.26k     6.38k   37.33k    70.00%
  Latency Distribution
     50%   82.34ms
     75%    0.00us
     90%    0.00us
     99%    0.00us
  52173 requests in 2.00s, 8.21MB read
Requests/sec:  26034.29
Transfer/sec:      4.10MB
"""

HELLO = Scenario(name="hello", group="test", title="GET /", path="/", expect=Expectation(body=b"Hello, World!"))
NOT_FOUND = Scenario(name="nf", group="test", title="404", path="/nope", expect=Expectation(status=404))
PIPELINED = Scenario(name="pipe", group="test", title="pipelined", path="/", expect=Expectation(), pipeline=4)


# --- wrk output -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "milliseconds"),
    [("635.91us", 0.63591), ("5.80ms", 5.8), ("1.10s", 1100.0), ("1.50m", 90_000.0), ("1h", 3_600_000.0)],
)
def test_durations_with_every_unit_become_milliseconds(text, milliseconds):
    assert duration_to_ms(text) == pytest.approx(milliseconds)


def test_sizes_become_bytes():
    assert size_to_bytes("512.00B") == 512
    assert size_to_bytes("206.00KB") == pytest.approx(206 * 1024)
    assert size_to_bytes("68.51MB") == pytest.approx(68.51 * 1024**2)
    with pytest.raises(WrkError):
        size_to_bytes("12 parsecs")


def test_clean_report_is_parsed():
    result = parse_wrk_output(WRK_CLEAN)
    assert result.requests == 561200
    assert result.duration_s == pytest.approx(10.01)
    assert result.requests_per_second == pytest.approx(56068.04)
    assert result.latency_ms == pytest.approx({"p50": 0.25, "p75": 0.491, "p90": 0.7, "p99": 5.8})
    assert result.socket_errors == {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    assert result.non_2xx_3xx == 0
    assert result.transfer_bytes == pytest.approx(68.51 * 1024**2)


def test_socket_errors_and_non_2xx_lines_are_parsed():
    result = parse_wrk_output(WRK_WITH_ERRORS)
    assert result.socket_errors == {"connect": 0, "read": 12, "write": 3, "timeout": 7}
    assert result.socket_error_total == 22
    assert result.non_2xx_3xx == 5500
    assert result.latency_ms["p50"] == pytest.approx(1100.0)
    assert result.latency_ms["p99"] == pytest.approx(1900.0)


def test_output_without_a_report_is_an_error():
    with pytest.raises(WrkError, match="unable to connect"):
        parse_wrk_output("unable to connect to 127.0.0.1:1 Connection refused\n")


def test_keep_alive_command():
    argv = wrk_command(HELLO, "http://127.0.0.1:9000", 10)
    assert argv[:4] == ["wrk", "-t1", "-c100", "-d10s"]
    assert "--latency" in argv
    assert argv[-1] == "http://127.0.0.1:9000/"
    assert "-s" not in argv


def test_pipelined_command_passes_the_depth_to_the_lua_script():
    argv = wrk_command(PIPELINED, "http://127.0.0.1:9000/", 3)
    assert argv[argv.index("-s") + 1] == str(PIPELINE_SCRIPT)
    assert argv[-3:] == ["http://127.0.0.1:9000/", "--", "4"]
    assert PIPELINE_SCRIPT.exists()


def test_scenario_headers_become_wrk_headers():
    close = next(scenario for scenario in GROUPS["hello"] if scenario.name == "connection-close")
    argv = wrk_command(close, "http://127.0.0.1:9000", 5)
    assert argv[argv.index("-H") + 1] == "Connection: close"


# --- verdicts and medians ---------------------------------------------------------------------


def result(**overrides) -> WrkResult:
    values = {
        "requests": 1000,
        "duration_s": 1.0,
        "requests_per_second": 1000.0,
        "latency_ms": {"p50": 0.5, "p75": 0.7, "p90": 0.9, "p99": 2.0},
        "socket_errors": {"connect": 0, "read": 0, "write": 0, "timeout": 0},
        "non_2xx_3xx": 0,
    }
    return WrkResult(**{**values, **overrides})


def test_a_clean_run_counts():
    assert wrk_failure(result(), HELLO) is None


def test_socket_errors_fail_a_run():
    failure = wrk_failure(result(socket_errors={"connect": 0, "read": 3, "write": 0, "timeout": 1}), HELLO)
    assert failure == "socket errors: read 3, timeout 1"


def test_error_statuses_fail_a_run_that_expects_success():
    assert "5 of 1000 responses had a status >= 400" in wrk_failure(result(non_2xx_3xx=5), HELLO)


def test_a_404_scenario_needs_every_response_to_be_an_error_status():
    assert wrk_failure(result(non_2xx_3xx=1000), NOT_FOUND) is None
    assert "10 of 1000 responses had a status below 400" in wrk_failure(result(non_2xx_3xx=990), NOT_FOUND)


def test_no_requests_fail_a_run():
    assert wrk_failure(result(requests=0, non_2xx_3xx=0), HELLO) == "no request completed"


def test_broken_latency_distribution_fails_unless_pipelined():
    broken = parse_wrk_output(WRK_PIPELINED_BROKEN_LATENCY)
    assert "inconsistent" in wrk_failure(broken, HELLO)
    assert wrk_failure(broken, PIPELINED) is None
    assert latency_problem({"p50": 1.0, "p90": 0.5, "p99": 2.0}) is not None
    assert "p99" in latency_problem({"p50": 1.0, "p90": 2.0})


def test_pipelined_runs_record_no_latency():
    record = RunRecord(scenario=PIPELINED.key, server="x", repeat=1)
    record.take_wrk(parse_wrk_output(WRK_PIPELINED_BROKEN_LATENCY), PIPELINED)
    assert record.p50_ms is None and record.p99_ms is None
    assert record.requests_per_second == pytest.approx(26034.29)


def run(server: str, repeat: int, rps: float | None, *, ok: bool = True, scenario: str = "test/hello") -> RunRecord:
    return RunRecord(
        scenario=scenario,
        server=server,
        repeat=repeat,
        ok=ok,
        failure=None if ok else "socket errors: read 1",
        requests_per_second=rps,
        p50_ms=rps / 1e5 if rps else None,
        p99_ms=1.0,
        cpu_us_per_request=10.0 + repeat,
        peak_rss_bytes=30_000_000,
    )


def test_medians_are_taken_metric_by_metric():
    summaries = summarise([run("a", 1, 100.0), run("b", 1, 50.0), run("a", 2, 300.0), run("a", 3, 200.0)])
    a, b = summaries
    assert (a.server, a.runs, a.ok_runs, a.ok) == ("a", 3, 3, True)
    assert a.medians["requests_per_second"] == 200.0
    assert a.medians["cpu_us_per_request"] == 12.0
    assert (a.rps_min, a.rps_max) == (100.0, 300.0)
    assert b.medians["requests_per_second"] == 50.0


def test_median_of_an_even_number_of_runs_is_the_mean_of_the_middle_two():
    (summary,) = summarise([run("a", 1, 100.0), run("a", 2, 200.0)])
    assert summary.medians["requests_per_second"] == 150.0


def test_one_failed_repeat_means_no_number_at_all():
    (summary,) = summarise([run("a", 1, 100.0), run("a", 2, None, ok=False), run("a", 3, 120.0)])
    assert not summary.ok
    assert summary.medians == {}
    assert summary.failures == ["run 2: socket errors: read 1"]


# --- selection and schedule -------------------------------------------------------------------


def test_scenarios_are_selected_by_group_key_or_name():
    assert select_scenarios(["hello"]) == GROUPS["hello"]
    assert [scenario.key for scenario in select_scenarios(["hello/json", "keep-alive"])] == [
        "hello/keep-alive",
        "hello/json",
    ]
    # A bare name shared by several groups selects it in each of them.
    assert [scenario.key for scenario in select_scenarios(["redirect"])] == ["hello/redirect", "rush-v2/redirect"]
    with pytest.raises(ValueError, match="unknown scenario"):
        select_scenarios(["no-such-thing"])


def test_default_servers_leave_out_variants():
    names = [server.name for server in select_servers(None)]
    assert "rush" in names
    assert all(server.default for server in select_servers(None))
    with pytest.raises(ValueError, match="unknown server"):
        select_servers(["nginx-on-mars"])


def test_every_server_command_has_its_placeholders(tmp_path):
    for server in SERVERS:
        for app in server.apps:
            workdir = tmp_path / server.name / app
            launch = Launch(app=app, host="127.0.0.1", port=1234, bin_dir=Path("/venv/bin"), workdir=workdir)
            command = server.command(launch)
            assert not any("{" in part for part in command), (server.name, app)
            if server.configure is None:
                assert "1234" in " ".join(command), (server.name, app)
            else:
                # The port is in the generated config (nginx, squid, tinyproxy), which the command points to.
                config = Path(server.configure(launch))
                assert "1234" in config.read_text() and "127.0.0.1" in config.read_text(), (server.name, app)
                assert str(config) in command, (server.name, app)


def test_a_server_takes_part_only_in_scenarios_it_has_an_app_for():
    rush, uvicorn, nginx = select_servers(["rush", "uvicorn", "nginx"])
    wsgi = Scenario(name="w", group="t", title="w", path="/", expect=Expectation(), app="wsgi")
    assert rush.serves(wsgi) and not uvicorn.serves(wsgi) and not nginx.serves(wsgi)
    assert not rush.serves(Scenario(name="x", group="t", title="x", path="/", expect=Expectation(), app="nope"))
    only_nginx = Scenario(name="n", group="t", title="n", path="/", expect=Expectation(), servers=("nginx",))
    assert nginx.serves(only_nginx) and not rush.serves(only_nginx)


def test_several_workers_only_for_servers_whose_command_says_how_many():
    two_workers = Scenario(name="r", group="t", title="r", path="/", expect=Expectation(), app="hello", workers=2)
    assert not any(server.serves(two_workers) for server in SERVERS)
    scalable = Server(
        name="scalable",
        title="s",
        venv="system",
        apps={"hello": ("s", "{port}", "--workers", "{workers}")},
        version_argv=(),
    )
    assert scalable.serves(two_workers)
    launch = Launch(app="hello", host="127.0.0.1", port=1, bin_dir=None, workdir=Path("/w"), workers=2)
    assert scalable.command(launch) == ["s", "1", "--workers", "2"]


def test_several_workers_run_on_both_cores():
    settings = Settings(server_cpu=1, client_cpu=0)
    assert settings.server_cores(HELLO) == "1"
    assert (
        settings.server_cores(Scenario(name="w", group="t", title="w", path="/", expect=Expectation(), workers=2))
        == "0,1"
    )


def test_open_file_limit_covers_the_largest_scenario():
    assert (
        needed_open_files(
            [HELLO, Scenario(name="c", group="t", title="c", path="/", expect=Expectation(), connections=1000)]
        )
        == 3024
    )
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # Asking for no more than we have changes nothing; the limit is never lowered.
    assert raise_open_file_limit(min(soft, 64)) == (soft, hard)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (soft, hard)


def test_runs_are_interleaved_and_the_order_rotates():
    servers = select_servers(["rush", "granian-rsgi", "uvicorn"])
    runs = plan([HELLO, NOT_FOUND], servers, repeat=3)
    assert len(runs) == 2 * 3 * 3
    first_scenario = [(planned.repeat, planned.server.name) for planned in runs[:9]]
    assert first_scenario[:3] == [(1, "rush"), (1, "granian-rsgi"), (1, "uvicorn")]
    assert first_scenario[3:6] == [(2, "granian-rsgi"), (2, "uvicorn"), (2, "rush")]
    assert first_scenario[6:9] == [(3, "uvicorn"), (3, "rush"), (3, "granian-rsgi")]
    assert {planned.scenario.key for planned in runs[9:]} == {NOT_FOUND.key}


# --- README writer ----------------------------------------------------------------------------


README = """# Benchmarks

Hand-written introduction.

<!-- results:headline -->
old headline
<!-- /results:headline -->

## hello

Method notes | with a pipe.

<!-- results:hello -->
old table
<!-- /results:hello -->

Footer text.
"""


def test_replace_section_swaps_only_what_is_between_the_markers():
    updated = replace_section(README, "hello", "new table\n")
    assert "old table" not in updated and "new table" in updated
    before, after = README.split("old table\n")
    assert updated.startswith(before)
    assert updated.endswith(after)
    assert updated == README.replace("old table", "new table")


def test_replace_section_appends_a_missing_section():
    updated = replace_section(README, "rust-frameworks", "numbers")
    assert updated.startswith(README)
    assert updated.endswith("<!-- results:rust-frameworks -->\nnumbers\n<!-- /results:rust-frameworks -->\n")


def test_replace_section_refuses_an_unterminated_section():
    with pytest.raises(ValueError, match="without"):
        replace_section("<!-- results:hello -->\nhand-written text\n", "hello", "x")


def results_for(runs: list[RunRecord], scenarios: list[Scenario]) -> dict:
    document = results_document(
        environment={
            "date": "2030-01-01 00:00 UTC",
            "cpu": "Test CPU",
            "cpu_count": 2,
            "kernel": "Linux 6.0",
            "python": {".venv": "3.11.7"},
            "servers": {"rush": "rush 0.1.0", "peer": "peer 1.0"},
            "wrk": "wrk 4.1.0",
            "rush_git": "abc1234",
        },
        settings={"duration_s": 10.0, "warmup_s": 2.0, "repeat": 1, "server_cpu": 1, "client_cpu": 0},
        scenarios=scenarios,
        servers={"rush": {"command": "rush app --port PORT"}, "peer": {"command": "peer app --port PORT"}},
        runs=runs,
    )
    document["wrk_commands"] = {scenario.key: f"wrk {scenario.path}" for scenario in scenarios}
    document["skipped"] = {"absent": "not installed"}
    return document


def test_group_table_and_headline_from_results():
    runs = [
        run("rush", 1, 300_000.0),
        run("peer", 1, 100_000.0),
        run("rush", 1, 200_000.0, scenario="test/nf"),
        run("peer", 1, None, ok=False, scenario="test/nf"),
    ]
    document = results_for(runs, [HELLO, NOT_FOUND])
    latest = merge_into_latest({"groups": {}}, document, ["test"], "results/x.json")
    table = render_group("test", latest["groups"]["test"], chart_exists=False)
    assert "| GET / | rush | 300,000 | 1.00x |" in table
    assert "| GET / | peer | 100,000 | 0.33x |" in table
    assert "| 404 | peer | failed: run 1: socket errors: read 1 |" in table
    assert "Test CPU" in table and "abc1234" in table and "results/x.json" in table
    assert "absent (not installed)" in table
    assert "`rush app --port PORT`" in table and "`wrk /nope`" in table
    rows = headline_rows(latest)
    assert rows[0]["best_peer"] == "peer" and rows[0]["ratio"] == pytest.approx(3.0)
    assert rows[1]["best_peer"] is None and rows[1]["ratio"] is None
    assert "| test: GET / | 300,000 | peer | 100,000 | 3.00x |" in render_headline(latest)


def test_numbers_set_by_a_saturated_load_generator_are_marked():
    saturated = run("rush", 1, 300_000.0)
    saturated.client_cpu_utilisation = 0.99
    document = results_for(
        [saturated, run("peer", 1, 100_000.0), run("rush", 1, 1e6, scenario="test/pipe")], [HELLO, PIPELINED]
    )
    latest = merge_into_latest({"groups": {}}, document, ["test"], "results/x.json")
    table = render_group("test", latest["groups"]["test"], chart_exists=True)
    assert "| GET / | rush | 300,000 † |" in table and "| GET / | peer | 100,000 |" in table
    assert "† wrk's core was at least 95% busy" in table
    assert "Pipelined scenarios show no latency" in table
    assert table.startswith("![test: ")
    assert "| test: GET / † |" in render_headline(latest)


def test_only_complete_groups_reach_the_readme():
    everything = select_servers(None)
    assert complete_groups(GROUPS["hello"], everything, "auto") == ["hello"]
    assert complete_groups(GROUPS["hello"][:2], everything, "auto") == []
    assert complete_groups(GROUPS["hello"], everything[:1], "auto") == []
    assert complete_groups(GROUPS["hello"][:2], everything[:1], "always") == ["hello"]
    assert complete_groups(GROUPS["hello"], everything, "never") == []


def test_render_readme_keeps_hand_written_text_and_is_idempotent(tmp_path):
    document = results_for([run("rush", 1, 300_000.0), run("peer", 1, 100_000.0)], [HELLO])
    latest = merge_into_latest({"groups": {}}, document, ["test"], "results/x.json")
    once = render_readme(README, latest, ["hello", "test"], charts_dir=tmp_path)
    assert render_readme(once, latest, ["hello", "test"], charts_dir=tmp_path) == once
    for hand_written in ("Hand-written introduction.", "Method notes | with a pipe.", "Footer text."):
        assert hand_written in once
    # hello has no measurement in `latest`: its section says so instead of keeping stale numbers.
    assert f"<!-- results:hello -->\n{NOT_MEASURED}\n<!-- /results:hello -->" in once
    assert "<!-- results:test -->" in once


def test_merging_a_group_keeps_the_other_groups():
    first = merge_into_latest({"groups": {}}, results_for([run("rush", 1, 1.0)], [HELLO]), ["test"], "a.json")
    first["groups"]["other"] = {"kept": True}
    second = merge_into_latest(first, results_for([run("rush", 1, 2.0)], [HELLO]), ["test"], "b.json")
    assert second["groups"]["other"] == {"kept": True}
    assert second["groups"]["test"]["results_file"] == "b.json"


# --- correctness check against canned responses on a loopback socket --------------------------


class CannedServer:
    """Answers every connection with fixed bytes (optionally closing), to exercise the response reader."""

    def __init__(self, response: bytes, close: bool = False) -> None:
        self.response, self.close = response, close
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.received = b""
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            connection.settimeout(5)
            self.received = connection.recv(65536)
            connection.sendall(self.response)
            if not self.close:
                # Keep the connection open until the client is done with it (recv returns b"").
                with contextlib.suppress(OSError):
                    while connection.recv(65536):
                        pass

    def __enter__(self) -> CannedServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.thread.join(5)
        self.listener.close()


def plain(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    head = f"HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body)}\r\n{extra}"
    return head.encode() + b"\r\n" + body


def test_pipelined_responses_are_all_checked():
    with CannedServer(plain(b"Hello, World!") * 4) as server:
        responses = check_scenario(PIPELINED_HELLO, "127.0.0.1", server.port, timeout=2)
    assert len(responses) == 4
    assert server.received == request_bytes(PIPELINED_HELLO, "127.0.0.1", server.port) * 4


PIPELINED_HELLO = Scenario(
    name="p", group="test", title="p", path="/", expect=Expectation(body=b"Hello, World!"), pipeline=4
)


def test_a_wrong_body_in_a_pipelined_stream_is_caught():
    with CannedServer(plain(b"Hello, World!") * 2 + plain(b"Oops") * 2) as server:
        with pytest.raises(CheckFailed, match=r"response 3 of 4.*body b'Oops'"):
            check_scenario(PIPELINED_HELLO, "127.0.0.1", server.port, timeout=2)


def test_chunked_bodies_headers_and_status_are_checked():
    chunked = (
        b"HTTP/1.1 301 Moved Permanently\r\nLocation: /egg\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    )
    redirect = Scenario(
        name="r", group="t", title="r", path="/easter", expect=Expectation(status=301, headers=(("location", "/egg"),))
    )
    with CannedServer(chunked) as server:
        (response,) = check_scenario(redirect, "127.0.0.1", server.port, timeout=2)
    assert response.body == b"abc"
    wrong_location = Scenario(
        name="r", group="t", title="r", path="/easter", expect=Expectation(status=301, headers=(("location", "/x"),))
    )
    with CannedServer(chunked) as server, pytest.raises(CheckFailed, match="location"):
        check_scenario(wrong_location, "127.0.0.1", server.port, timeout=2)


def test_wrong_status_and_json_are_caught():
    json_scenario = Scenario(name="j", group="t", title="j", path="/json", expect=Expectation(json={"a": 1}))
    with CannedServer(plain(b'{"a": 1}')) as server:
        check_scenario(json_scenario, "127.0.0.1", server.port, timeout=2)
    with CannedServer(plain(b'{"a": 2}')) as server, pytest.raises(CheckFailed, match="JSON"):
        check_scenario(json_scenario, "127.0.0.1", server.port, timeout=2)
    with CannedServer(plain(b"nope", status="500 Internal Server Error")) as server:
        with pytest.raises(CheckFailed, match="status 500, expected 200"):
            check_scenario(HELLO, "127.0.0.1", server.port, timeout=2)


def test_connection_close_must_close():
    close = Scenario(
        name="c",
        group="t",
        title="c",
        path="/",
        headers=(("Connection", "close"),),
        expect=Expectation(body=b"Hello, World!"),
        expect_close=True,
    )
    with CannedServer(plain(b"Hello, World!"), close=True) as server:
        check_scenario(close, "127.0.0.1", server.port, timeout=2)
    with CannedServer(plain(b"Hello, World!"), close=False) as server:
        with pytest.raises(CheckFailed, match="not closed"):
            check_scenario(close, "127.0.0.1", server.port, timeout=0.7)


def test_media_types_match_with_parameters():
    assert media_type_matches("text/plain", "text/plain; charset=utf-8")
    assert media_type_matches("/egg", "/egg")
    assert not media_type_matches("text/plain", "text/html")


# --- processes --------------------------------------------------------------------------------


def test_a_process_tree_is_measured_and_stopped(tmp_path):
    parent_code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
        "time.sleep(30)\n"
    )
    process = ServerProcess(
        [sys.executable, "-c", parent_code], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, log_path=tmp_path / "log"
    )
    try:
        deadline = time.monotonic() + 10
        while len(process_tree(process.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = process_tree(process.pid)
        assert len(tree) == 2 and tree[0] == process.pid
        assert cpu_seconds(tree) >= 0
        assert memory_bytes(tree) > 1_000_000
        assert memory_bytes(tree, "VmHWM") >= memory_bytes(tree) // 2
    finally:
        process.stop(timeout=1)
    assert not process.is_alive()
    assert process_tree(process.pid) == []
    child = tree[1]
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split(")")[-1][:3]


def test_importing_the_suite_needs_only_the_standard_library():
    code = (
        "import sys, benches.cli, benches.chart, benches.tools\n"
        "assert 'matplotlib' not in sys.modules\n"
        "assert 'rush' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, check=True)


# --- nginx config, static site ----------------------------------------------------------------


def nginx_config(app: str, open_file_cache: bool = False) -> str:
    return render_config(
        app,
        host="127.0.0.1",
        port=8123,
        workdir=Path("/run/w"),
        site_dir=Path("/srv/site"),
        open_file_cache=open_file_cache,
        user=("bench", "bench"),
    )


def test_nginx_runs_one_worker_on_the_run_port_with_everything_under_the_workdir():
    config = nginx_config("hello")
    assert "worker_processes 1;" in config
    assert "listen 127.0.0.1:8123 backlog=2048;" in config
    assert "access_log off;" in config
    assert "pid /run/w/nginx.pid;" in config
    assert "user bench bench;" in config
    # Every path nginx writes is under the run's directory; nothing under /etc or /var.
    assert "/etc/" not in config and "/var/" not in config
    assert all("/run/w/temp/" in line for line in config.splitlines() if "_temp_path" in line)
    assert 'return 200 "Hello, World!";' in config and "return 301 /egg;" in config
    assert "absolute_redirect off;" in config
    assert "open_file_cache" not in config
    assert config.count("{") == config.count("}")


def test_nginx_static_configs_with_and_without_open_file_cache():
    plain, cached = nginx_config("static"), nginx_config("static", open_file_cache=True)
    assert "location /static/ {\n            alias /srv/site/;" in plain
    assert "open_file_cache" not in plain
    assert "open_file_cache max=" in cached and "sendfile on;" in cached
    site_root = nginx_config("rush-v2")
    assert "root /srv/site;" in site_root and "index index.html;" in site_root
    with pytest.raises(KeyError):
        nginx_config("fastapi")


def test_nginx_config_is_written_with_its_temp_directory(tmp_path):
    path = write_config("hello", host="127.0.0.1", port=1, workdir=tmp_path, site_dir=tmp_path, open_file_cache=False)
    assert path == tmp_path / "nginx.conf" and (tmp_path / "temp").is_dir()


def test_site_files_have_exact_sizes_and_are_rewritten_only_when_different(tmp_path):
    files = site_files()
    assert len(files[SMALL_FILE]) == 4096 and len(files[LARGE_FILE]) == 1024 * 1024
    assert text_of_size(4096).startswith(b"line 0000000 ") and text_of_size(4096) == text_of_size(4096)
    ensure_site(tmp_path)
    assert (tmp_path / LARGE_FILE).read_bytes() == files[LARGE_FILE]
    before = (tmp_path / SMALL_FILE).stat().st_mtime_ns
    (tmp_path / "index.html").write_bytes(b"changed")
    ensure_site(tmp_path)
    assert (tmp_path / "index.html").read_bytes() == files["index.html"]
    assert (tmp_path / SMALL_FILE).stat().st_mtime_ns == before
    assert not list(tmp_path.glob(".*"))


def test_a_body_is_checked_by_its_digest():
    by_digest = Scenario(
        name="f", group="t", title="f", path="/f", expect=Expectation(body_sha256=sha256(b"Hello, World!"))
    )
    with CannedServer(plain(b"Hello, World!")) as server:
        check_scenario(by_digest, "127.0.0.1", server.port, timeout=2)
    with CannedServer(plain(b"Hello, World?")) as server, pytest.raises(CheckFailed, match="not the expected one"):
        check_scenario(by_digest, "127.0.0.1", server.port, timeout=2)


def test_every_scenario_has_rush_and_at_least_one_other_server():
    for scenario in all_scenarios():
        serving = [server.name for server in SERVERS if server.default and server.serves(scenario)]
        # The http3 group's rows for rush alone (benches.scenarios.RUSH_ALONE says why): they give
        # rush's own ratios between HTTP/3, HTTP/2 and HTTP/1.1 (issue 35).
        if scenario.group == "http3" and scenario.servers == RUSH_ALONE:
            assert serving == ["rush"], (scenario.key, serving)
            continue
        assert "rush" in serving and len(serving) >= 2, (scenario.key, serving)


def test_teaching_groups_stay_out_of_the_headline():
    teaching = Scenario(name="root", group="concurrency-models", title="GET /", path="/", expect=Expectation())
    document = results_for(
        [run("rush", 1, 100.0, scenario=teaching.key), run("peer", 1, 50.0, scenario=teaching.key)], [teaching]
    )
    latest = merge_into_latest({"groups": {}}, document, ["concurrency-models"], "results/x.json")
    assert headline_rows(latest) == []
    assert "| GET / | peer | 50 | 0.50x |" in render_group("concurrency-models", latest["groups"]["concurrency-models"])


def test_a_group_lists_only_its_servers_and_the_commands_it_used():
    document = results_for([run("rush", 1, 100.0)], [HELLO])
    document["servers"] = {
        "rush": {"commands": {"hello": "rush hello-app", "wsgi": "rush wsgi-app"}},
        "absent": {"commands": {"hello": "never ran"}},
    }
    latest = merge_into_latest({"groups": {}}, document, ["test"], "results/x.json")
    assert latest["groups"]["test"]["servers"] == {"rush": {"commands": {"hello": "rush hello-app"}}}
    assert "- rush (?): `rush hello-app`" in render_group("test", latest["groups"]["test"], chart_exists=False)


# --- Rust peers -------------------------------------------------------------------------------

CARGO_LOCK = """\
version = 4

[[package]]
name = "hyper"
version = "1.7.0"
source = "registry+https://github.com/rust-lang/crates.io-index"

[[package]]
name = "hyper-util"
version = "0.1.17"
"""


def test_framework_versions_come_from_cargo_lock():
    assert locked_version("hyper", CARGO_LOCK) == "1.7.0"
    assert locked_version("hyper-util", CARGO_LOCK) == "0.1.17"
    assert locked_version("actix-web", CARGO_LOCK) is None
    # The real lock file pins both frameworks the suite builds.
    lock = (RUST_DIR / "Cargo.lock").read_text()
    assert locked_version("actix-web", lock) and locked_version("hyper", lock)


def test_rust_peers_are_a_workspace_of_their_own_built_in_release_mode():
    manifest = (RUST_DIR / "Cargo.toml").read_text()
    assert "\n[workspace]\n" in manifest
    command = build_command()
    assert command[:3] == ["nice", "-n", "10"] and "--release" in command and "--locked" in command
    # cargo discovers benches/*.rs and benches/*/main.rs as bench targets of the root package.
    assert not list(RUST_DIR.glob("*.rs")) and not (RUST_DIR / "main.rs").exists()


def test_the_rust_group_runs_one_and_two_workers_with_and_without_pipelining():
    shapes = [(scenario.workers, scenario.pipeline) for scenario in GROUPS["rust-frameworks"]]
    assert shapes == [(1, 1), (1, 128), (2, 1), (2, 128)]
    for scenario in GROUPS["rust-frameworks"]:
        assert {server.name for server in SERVERS if server.serves(scenario)} == {"rush", "actix-web", "hyper"}


def test_cpu_of_children_that_exited_is_counted(tmp_path):
    # The parent forks a child that burns CPU and exits, and waits for it: the child is gone from
    # the tree, but its CPU time is in the parent's cutime, which the tree's CPU must include.
    code = (
        "import os, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    end = time.process_time() + 0.3\n"
        "    while time.process_time() < end: pass\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "print('reaped', flush=True)\n"
        "time.sleep(30)\n"
    )
    process = ServerProcess(
        [sys.executable, "-c", code], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, log_path=tmp_path / "log"
    )
    try:
        deadline = time.monotonic() + 10
        while "reaped" not in (tmp_path / "log").read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process_tree(process.pid) == [process.pid]
        assert process.cpu_seconds() >= 0.25
    finally:
        process.stop(timeout=1)


def test_a_server_that_stops_answering_a_pipelined_batch_is_reported_with_how_far_it_got():
    with CannedServer(plain(b"Hello, World!")) as server:
        with pytest.raises(CheckFailed, match=r"after 1 of 4 responses"):
            check_scenario(PIPELINED_HELLO, "127.0.0.1", server.port, timeout=0.5)


def test_tables_say_that_several_workers_share_the_load_generators_core():
    two = Scenario(name="two", group="test", title="2 workers", path="/", expect=Expectation(), workers=2)
    document = results_for([run("rush", 1, 100.0, scenario=two.key)], [HELLO, two])
    latest = merge_into_latest({"groups": {}}, document, ["test"], "results/x.json")
    table = render_group("test", latest["groups"]["test"], chart_exists=False)
    assert "runs on CPUs 0,1, sharing CPU 0 with wrk" in table
    assert "(`taskset -c 0,1` with several workers)" in table
    single = merge_into_latest({"groups": {}}, results_for([run("rush", 1, 1.0)], [HELLO]), ["test"], "x.json")
    assert "sharing CPU" not in render_group("test", single["groups"]["test"], chart_exists=False)


# --- the catalog group (seed 004) -------------------------------------------------------------


def test_the_catalog_spread_is_500_distinct_keys_over_the_generators_values():
    from urllib.parse import parse_qs, urlsplit

    from benches import catalog

    keys = {
        tuple(parse_qs(urlsplit(path).query)[name][0] for name in ("arch", "build", "language"))
        for path in catalog.SPREAD
    }
    assert len(catalog.SPREAD) == len(keys) == 500
    assert catalog.spread() == catalog.SPREAD, "the same keys on every run"
    arches = {arch for arch, _, _ in keys}
    assert {"88f6281", "88f6282", "x86_64"} <= arches and "noarch" not in arches
    assert len({language for _, _, language in keys}) == 20


def test_catalog_scenarios_cycle_through_the_spread_with_their_script(tmp_path):
    from benches import catalog

    warm = next(scenario for scenario in GROUPS["catalog"] if scenario.name == "warm-sqlite-close")
    argv = wrk_command(warm, "http://127.0.0.1:8000", 5)
    assert argv[argv.index("-s") + 1].endswith("benches/lua/catalog.lua")
    assert argv[-2:] == ["--", str(catalog.PATHS_FILE)]
    assert "Connection: close" in argv
    written = catalog.write_paths(tmp_path / "paths.txt").read_text().splitlines()
    assert written == list(catalog.SPREAD)
    # Each database and state has both connection modes, and the ceiling has rush and nginx.
    names = {scenario.name for scenario in GROUPS["catalog"]}
    for database in catalog.DATABASES:
        for state in ("warm", "cold"):
            assert {f"{state}-{database}", f"{state}-{database}-close"} <= names
    ceiling = next(scenario for scenario in GROUPS["catalog"] if scenario.name == "ceiling")
    assert [server.name for server in SERVERS if server.serves(ceiling)] == ["rush", "nginx"]


def catalog_answer(build: int, host: str, keyrings: bool = True) -> bytes:
    entry = {"package": "git", "version": "2-1", "dname": "Git", "desc": "d", "thumbnail": []}
    entry["link"] = f"http://{host}/nas/git/1/git.spk?arch=x86_64&build={build}"
    if build < 5004:
        return json.dumps([entry]).encode()
    document = {"packages": [entry]}
    if build < 40000 and keyrings:
        document["keyrings"] = []
    return json.dumps(document).encode()


def test_catalog_answers_are_checked_for_their_shape_and_host():
    from benches.catalog import shape_problems

    host = "127.0.0.1:8000"
    for build in (4458, 24922, 42661):
        path = f"/nas/?build={build}&arch=x86_64&language=enu"
        assert shape_problems(path, catalog_answer(build, host), host) == []
        assert shape_problems(path, catalog_answer(build, "first.example"), host), "a baked-in host"
    assert shape_problems("/nas/?build=24922", catalog_answer(24922, host, keyrings=False), host)
    assert shape_problems("/nas/?build=42661", catalog_answer(24922, host), host)
    assert shape_problems("/nas/?build=4458", catalog_answer(42661, host), host)
    assert shape_problems("/nas/?build=4458", b"<html>", host)


class CatalogCanned:
    """Answers each connection with a catalog of the shape its request's build asks for, its
    URLs on ``host`` (``None``: the Host the client sent)."""

    def __init__(self, host: str | None = None) -> None:
        self.host = host
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.listener.settimeout(5)
        self.paths: list[str] = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = self.listener.accept()
                with connection:
                    request = connection.recv(65536).decode()
                    path = request.split(" ")[1]
                    self.paths.append(path)
                    sent_host = request.split("Host: ")[1].split("\r\n")[0]
                    body = catalog_answer(int(path.split("build=")[1].split("&")[0]), self.host or sent_host)
                    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                    connection.sendall(head.encode() + b"\r\n" + body)

    def __enter__(self) -> CatalogCanned:
        return self

    def __exit__(self, *exc_info: object) -> None:
        # shutdown() wakes the accept() blocked in the thread (close() alone would not).
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.thread.join(5)
        self.listener.close()


def test_a_spread_is_checked_path_by_path():
    from benches import catalog

    warm = next(scenario for scenario in GROUPS["catalog"] if scenario.name == "warm-sqlite")
    with CatalogCanned() as server:
        responses = check_scenario(warm, "127.0.0.1", server.port, timeout=2, limit=3)
    assert len(responses) == 3 and server.paths == list(catalog.SPREAD[:3])
    with CatalogCanned(host="first.example") as server, pytest.raises(CheckFailed, match="is not on http"):
        check_scenario(warm, "127.0.0.1", server.port, timeout=2, limit=3)


def test_proxy_scenarios_send_absolute_form_targets_through_the_proxy():
    from dataclasses import replace

    from benches.scenarios import GROUPS
    from benches.wrk import PROXY_SCRIPT, TUNNEL_LOAD, wrk_command

    loads = set()
    for scenario in GROUPS["proxy"]:
        assert scenario.origin_app is not None and scenario.path.startswith("http://{origin}")
        measured = replace(scenario, path=scenario.path.format(origin="127.0.0.1:9"))
        argv = wrk_command(measured, "http://127.0.0.1:8888", 1.0)
        loads.add(scenario.load)
        if scenario.load == "wrk":
            # wrk connects to the proxy; the script sends the origin's absolute-form target.
            assert argv[-6:] == ["-s", str(PROXY_SCRIPT), "http://127.0.0.1:8888/", "--", "http://127.0.0.1:9/", "1"]
        else:
            # CONNECT tunnels: wrk cannot, benches/tunnel_load.py does, checking every body's digest.
            assert argv[1] == str(TUNNEL_LOAD)
            assert argv[argv.index("--proxy") + 1] == "127.0.0.1:8888"
            assert argv[argv.index("--target") + 1] == "http://127.0.0.1:9/"
            assert argv[argv.index("--sha256") + 1] == scenario.expect.body_sha256
    assert loads == {"wrk", "tunnel"}
    assert {"rush", "squid", "tinyproxy", "proxy.py"} <= {server.name for server in SERVERS if "proxy" in server.apps}


def test_tunnel_load_reports_as_wrk_does_and_checks_bodies():
    import hashlib
    import http.server

    from benches.wrk import TUNNEL_LOAD, parse_wrk_output

    class Tunnel(http.server.BaseHTTPRequestHandler):
        """A forward proxy reduced to CONNECT, answering the tunnelled GETs itself."""

        protocol_version = "HTTP/1.1"

        def do_CONNECT(self):
            self.send_response(200, "Connection established")
            self.end_headers()
            # Each tunnelled request: its request line, fields up to the empty line, then the answer.
            while self.rfile.readline():
                while self.rfile.readline() not in (b"", b"\r\n"):
                    pass
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Tunnel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = [sys.executable, str(TUNNEL_LOAD), "--proxy", f"127.0.0.1:{server.server_address[1]}"]
        base += ["--target", "http://127.0.0.1:9/"]
        right = hashlib.sha256(b"hello").hexdigest()
        assert subprocess.run([*base, "--sha256", right, "--check"], timeout=30).returncode == 0
        assert subprocess.run([*base, "--sha256", "0" * 64, "--check"], capture_output=True, timeout=30).returncode == 1
        output = subprocess.run(
            [*base, "--sha256", right, "--connections", "2", "--duration", "0.2"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        result = parse_wrk_output(output)
        assert result.requests > 0 and result.non_2xx_3xx == 0 and result.socket_error_total == 0
        assert set(result.latency_ms) >= {"p50", "p90", "p99"}
    finally:
        server.shutdown()
        server.server_close()


def test_proxy_peer_configs_listen_on_the_run_address_and_keep_files_in_the_workdir(tmp_path):
    from benches.proxies import squid_config, tinyproxy_config

    squid = squid_config("127.0.0.1", 4321, tmp_path)
    assert "http_port 127.0.0.1:4321" in squid and "cache deny all" in squid and "access_log none" in squid
    assert f"pid_filename {tmp_path}/squid.pid" in squid
    tinyproxy = tinyproxy_config("127.0.0.1", 4321, tmp_path)
    assert "Port 4321" in tinyproxy and "Listen 127.0.0.1" in tinyproxy and str(tmp_path) in tinyproxy


# --- the websocket group ------------------------------------------------------------------------

WS_ECHO = Scenario(
    name="echo",
    group="ws",
    title="echo",
    path="/echo",
    expect=Expectation(status=101),
    app="ws",
    load="websocket",
    message_size=20,
)
WS_BROADCAST = Scenario(
    name="bc",
    group="ws",
    title="broadcast",
    path="/broadcast",
    expect=Expectation(status=101),
    app="ws",
    load="websocket",
    connections=16,
    message_size=20,
)
WS_IDLE = Scenario(
    name="idle",
    group="ws",
    title="idle",
    path="/echo",
    expect=Expectation(status=101),
    app="ws",
    load="ws-idle",
    connections=1000,
    message_size=20,
    deflate=True,
)
WS_LOAD_CLEAN = (
    '{"mode": "echo", "url": "ws://127.0.0.1:1/echo", "connections": 100, "size": 20, "ok": true, '
    '"messages": 500000, "bytes": 10000000, "duration_s": 10.0000, "messages_per_second": 50000.00, '
    '"latency_ms": {"p50": 1.500, "p75": 1.800, "p90": 2.000, "p99": 4.000, "max": 9.000}, '
    '"errors": {"connect": 0, "wrong": 0, "missed": 0, "closed": 0, "read": 0, "write": 0, "timeout": 0}}'
)


def test_a_ws_load_report_becomes_a_wrk_result_that_counts():
    result = parse_ws_load_output(WS_LOAD_CLEAN + "\n")
    assert result.requests == 500_000 and result.requests_per_second == 50_000.0
    assert result.latency_ms == {"p50": 1.5, "p75": 1.8, "p90": 2.0, "p99": 4.0}
    assert wrk_failure(result, WS_ECHO) is None


def test_a_ws_load_report_without_throughput_never_becomes_a_number():
    wrong = WS_LOAD_CLEAN.replace('"ok": true', '"ok": false').replace("50000.00", "null")
    wrong = wrong.replace('"wrong": 0', '"wrong": 3')
    with pytest.raises(WrkError, match=r"no throughput.*'wrong': 3"):
        parse_ws_load_output(wrong)
    with pytest.raises(WrkError, match="no ws-load report"):
        parse_ws_load_output("thread panicked\n")


def test_ws_load_commands_follow_the_scenario():
    echo = ws_load_command(WS_ECHO, "http://127.0.0.1:8123", 10)
    assert echo[0].endswith("ws-load") and echo[1:3] == ["--url", "ws://127.0.0.1:8123/echo"]
    assert echo[echo.index("--mode") + 1] == "echo" and echo[echo.index("--size") + 1] == "20"
    assert echo[echo.index("--warmup") + 1] == "0"
    broadcast = wrk_command(WS_BROADCAST, "http://127.0.0.1:8123", 5)
    assert broadcast[broadcast.index("--mode") + 1] == "broadcast"
    assert broadcast[broadcast.index("--connections") + 1] == "16"
    idle = wrk_command(WS_IDLE, "http://127.0.0.1:8123", 0)
    assert idle[1:4] == ["-m", "benches.wsclient", "idle"] and idle[-1] == "--deflate"


def test_the_websocket_group_has_its_scenarios_and_servers():
    names = [scenario.name for scenario in GROUPS["websocket"]]
    assert names == ["echo-20B", "echo-16KiB", "broadcast-16", "broadcast-1000", "idle-1000", "idle-1000-deflate"]
    serving = {server.name for server in SERVERS if server.default and server.serves(GROUPS["websocket"][0])}
    assert {"rush", "rush-asgi", "rush-starlette", "uvicorn", "uvicorn-wsproto", "granian-asgi", "socketify"} <= serving
    deflate = GROUPS["websocket"][-1]
    assert not any(server.serves(deflate) for server in SERVERS if server.name.startswith("granian"))


def test_a_partial_websocket_run_leaves_the_readme_alone():
    everything = select_servers(None)
    assert complete_groups(GROUPS["websocket"], everything, "auto") == ["websocket"]
    assert complete_groups(GROUPS["websocket"], select_servers(["rush", "uvicorn"]), "auto") == []
    assert complete_groups(GROUPS["websocket"][:2], everything, "auto") == []


def test_websocket_table_shows_messages_and_memory_per_connection():
    echo_rush = run("rush", 1, 60_000.0, scenario="ws/echo")
    echo_peer = run("peer", 1, 20_000.0, scenario="ws/echo")
    idle_rush = RunRecord(scenario="ws/idle", server="rush", repeat=1, ok=True, rss_per_connection_bytes=5120.0)
    idle_rush.cpu_us_per_request, idle_rush.peak_rss_bytes = 40.0, 60_000_000
    document = results_for([echo_rush, echo_peer, idle_rush], [WS_ECHO, WS_IDLE])
    summaries = {(summary["scenario"], summary["server"]): summary for summary in document["summaries"]}
    assert summaries[("ws/idle", "rush")]["medians"]["rss_per_connection_bytes"] == 5120.0
    latest = merge_into_latest({"groups": {}}, document, ["ws"], "results/x.json")
    table = render_group("ws", latest["groups"]["ws"], chart_exists=False)
    assert "| scenario | server | messages/s | vs rush |" in table
    assert "| echo | peer | 20,000 | 0.33x |" in table
    assert "| idle | rush | — | — | — | — | 40.0 µs ‡ | 60.0 MB | 5.00 KiB |" in table
    assert [row["scenario"] for row in headline_rows(latest)] == ["ws: echo"]


@pytest.mark.skipif(not WS_LOAD.exists(), reason="ws-load is not built (make bench-tools)")
def test_ws_load_reports_no_throughput_when_it_cannot_connect():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        completed = subprocess.run(
            [str(WS_LOAD), "--url", f"ws://127.0.0.1:{port}/echo", "--connections", "2", "--duration", "1"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert completed.returncode == 1
    report = json.loads(completed.stdout)
    assert report["messages_per_second"] is None and report["errors"]["connect"] == 2


# --- the http2 group: h2load's report, its refusals, the h2 answer check, idle connections -----

# Real h2load 1.52 reports (progress lines trimmed): rush over h2c; rush answering a 404; rush over
# --h1; nginx closing each connection after keepalive_requests (1000 at the time) with a GOAWAY,
# which fails the streams in flight; nginx's h2c-only port asked by --h1 (nothing done at all).
H2LOAD_CLEAN = """\
starting benchmark...
Warm-up started for thread #0.
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Application protocol: h2c
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 1.01s, 51920.00 req/s, 1.93MB/s
requests: 51920 total, 51924 started, 51920 done, 51920 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 51920 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 1.93MB (2025132) total, 405.75KB (415490) headers (space savings 91.66%), 659.14KB (674960) data
                     min         max         mean         sd        +/- sd
time for request:       14us     64.85ms        69us       595us    98.79%
time for connect:       62us        86us        74us        16us   100.00%
time to 1st byte:    10.17ms     10.38ms     10.28ms       149us   100.00%
req/s           :   25922.34    25978.02    25950.18       39.37   100.00%
"""

H2LOAD_NOT_FOUND = """\
Application protocol: h2c
finished in 1.00s, 23756.00 req/s, 789.02KB/s
requests: 23756 total, 23760 started, 23756 done, 0 succeeded, 23756 failed, 0 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 23756 4xx, 0 5xx
traffic: 789.02KB (807956) total, 162.52KB (166422) headers (space savings 92.63%), 208.79KB (213804) data
                     min         max         mean         sd        +/- sd
time for request:       14us     10.33ms       157us       606us    96.21%
"""

H2LOAD_HTTP1 = """\
Application protocol: http/1.1
finished in 1.00s, 25507.00 req/s, 3.16MB/s
requests: 25507 total, 25509 started, 25507 done, 25507 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 25507 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 3.16MB (3315910) total, 2.43MB (2550700) headers (space savings 0.00%), 331.59KB (331591) data
"""

H2LOAD_GOAWAY = """\
Application protocol: h2c
Process Request Failure:2
Process Request Failure:12
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 1.01s, 10000.00 req/s, 781.89KB/s
requests: 10076 total, 10090 started, 10076 done, 10000 succeeded, 76 failed, 76 errored, 0 timeout
status codes: 10000 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 781.89KB (800660) total, 478.52KB (490000) headers (space savings 50.51%), 126.95KB (130000) data
                     min         max         mean         sd        +/- sd
time for request:       17us     20.09ms       785us      1.70ms    98.00%
"""

H2LOAD_NOTHING = """\
finished in 1.01s, 0.00 req/s, 0B/s
requests: 0 total, 10 started, 0 done, 0 succeeded, 0 failed, 0 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 0 4xx, 0 5xx
traffic: 0B (0) total, 0B (0) headers (space savings 0.00%), 0B (0) data
"""

H2 = Scenario(
    name="h2", group="test", title="h2", path="/", expect=Expectation(body=b"Hello, World!"), load="h2load", streams=10
)
H2_NOT_FOUND = Scenario(
    name="h2nf", group="test", title="h2 404", path="/nope", expect=Expectation(status=404), load="h2load"
)
H1_BY_H2LOAD = Scenario(name="h1", group="test", title="h1", path="/", expect=Expectation(), load="h2load-h1")


def test_h2load_report_is_parsed():
    result = parse_h2load_output(H2LOAD_CLEAN)
    assert (result.requests, result.started, result.done, result.succeeded) == (51920, 51924, 51920, 51920)
    assert (result.failed, result.errored, result.timeouts) == (0, 0, 0)
    assert result.statuses == {"2xx": 51920, "3xx": 0, "4xx": 0, "5xx": 0}
    assert result.requests_per_second == 51920.0
    assert result.duration_s == pytest.approx(1.01)
    assert result.protocol == "h2c"
    assert result.transfer_bytes == 2025132
    assert h2load_failure(result, H2) is None
    # The runner's record takes it as it takes wrk's report, and keeps h2load's own counts.
    record = RunRecord(scenario=H2.key, server="rush", repeat=1)
    record.take_wrk(result, H2)
    assert record.requests_per_second == 51920.0 and record.socket_errors == {"errored": 0, "timeout": 0}
    assert record.h2load_counts["succeeded"] == 51920 and record.h2load_counts["protocol"] == "h2c"


def test_h2load_output_without_a_report_is_an_error():
    with pytest.raises(H2loadError, match="no h2load report"):
        parse_h2load_output("starting benchmark...\nconnect: Connection refused\n")
    with pytest.raises(WrkError):
        parse_load_output(H2, "nothing")


def test_failed_and_errored_streams_refuse_the_run():
    # seed 003 counted its errors as throughput; here 76 failed streams out of 10,076 refuse the row.
    result = parse_h2load_output(H2LOAD_GOAWAY)
    failure = wrk_failure(result, H2)
    assert failure is not None and "76 errored" in failure and "76 failed" in failure


def test_error_statuses_refuse_a_run_that_expects_success_and_count_for_one_that_expects_them():
    result = parse_h2load_output(H2LOAD_NOT_FOUND)
    failure = h2load_failure(result, H2)
    assert failure is not None and "23756 failed" in failure and "23756 4xx" in failure
    assert h2load_failure(result, H2_NOT_FOUND) is None
    assert "succeeded" in h2load_failure(parse_h2load_output(H2LOAD_CLEAN), H2_NOT_FOUND)


def test_the_protocol_h2load_spoke_must_be_the_one_asked():
    http1 = parse_h2load_output(H2LOAD_HTTP1)
    assert h2load_failure(http1, H1_BY_H2LOAD) is None
    assert "spoke http/1.1, expected h2c" in h2load_failure(http1, H2)
    assert "spoke h2c, expected http/1.1" in h2load_failure(parse_h2load_output(H2LOAD_CLEAN), H1_BY_H2LOAD)


def test_a_run_where_nothing_was_done_is_refused():
    assert "no request completed" in h2load_failure(parse_h2load_output(H2LOAD_NOTHING), H1_BY_H2LOAD)


def test_latency_percentiles_and_wrong_statuses_come_from_the_request_log(tmp_path):
    log = tmp_path / "requests.tsv"
    # start µs, status, µs to the end of the response: 100 requests of 1..100 ms.
    log.write_text("".join(f"1795780339773903\t200\t{ms * 1000}\n" for ms in range(1, 101)))
    report = H2LOAD_CLEAN.replace("51920 done, 51920 succeeded", "100 done, 100 succeeded")
    report = report.replace("51920 2xx", "100 2xx")
    result = parse_load_output(H2, report, log)
    assert result.latency_ms == {"p50": 50.0, "p75": 75.0, "p90": 90.0, "p99": 99.0}
    assert h2load_failure(result, H2) is None
    # A log that does not hold every request done is not this run's.
    assert "log holds 100 requests" in h2load_failure(parse_load_output(H2, H2LOAD_CLEAN, log), H2)
    with log.open("a") as lines:
        lines.write("1795780339773903\t-1\t5000\n1795780339773903\t503\t5000\n")
    report = report.replace("100 done, 100 succeeded", "102 done, 102 succeeded")
    failure = h2load_failure(parse_load_output(H2, report, log), H2)
    assert failure is not None and "1 with status -1" in failure and "1 with status 503" in failure


def test_h2load_commands_for_h2c_and_its_http1_twin():
    hello, twin = (next(s for s in GROUPS["http2"] if s.name == name) for name in ("app-hello", "app-hello-h1"))
    argv = wrk_command(hello, "http://127.0.0.1:8000", 10, log_file="/tmp/r.tsv")
    assert argv[:6] == ["h2load", "-t1", "-c100", "-m10", "-D10000ms", "-N"]
    assert "--h1" not in argv and argv[argv.index("--log-file") + 1] == "/tmp/r.tsv"
    assert argv[-1] == "http://127.0.0.1:8000/"
    twin_argv = wrk_command(twin, "http://127.0.0.1:8000", 10)
    # HTTP/1.1 with one request in flight per connection: -m above 1 would pipeline.
    assert "--h1" in twin_argv and "-m1" in twin_argv and "-c100" in twin_argv
    one_stream = next(s for s in GROUPS["http2"] if s.name == "file-1m")
    assert {"-c1", "-m1"} <= set(wrk_command(one_stream, "http://127.0.0.1:8000", 10))


def test_the_http2_group_runs_each_interface_on_its_peers():
    def serving(name: str) -> list[str]:
        scenario = next(s for s in GROUPS["http2"] if s.name == name)
        return [server.name for server in SERVERS if server.default and server.serves(scenario)]

    assert serving("app-hello") == serving("app-hello-h1") == ["rush", "granian-rsgi", "nginx"]
    assert serving("asgi-hello") == ["rush", "granian-asgi", "hypercorn", "uvicorn-h2"]
    assert serving("wsgi-hello") == ["rush", "granian-wsgi"]
    assert serving("file-1m") == serving("file-4k") == ["rush", "granian-rsgi", "nginx", "nginx-ofc"]
    assert serving("idle-1000-asgi") == ["rush", "granian-asgi", "hypercorn", "uvicorn-h2"]
    granian = next(server for server in SERVERS if server.name == "granian-asgi").apps["h2-asgi"]
    assert granian[granian.index("--http") + 1] == "2" and "--http1-pipeline-flush" not in granian
    assert "listen 127.0.0.1:8123 http2 backlog=2048;" in nginx_config("h2-static")


def test_idle_rows_get_a_table_of_their_own_and_stay_out_of_the_headline():
    idle = Scenario(name="idle", group="test", title="idle h2c", path="/", expect=Expectation(), load="h2-idle")
    memory = RunRecord(scenario=idle.key, server="rush", repeat=1, ok=True, rss_per_connection_bytes=8192.0)
    document = results_for([run("rush", 1, 100.0), memory], [HELLO, idle])
    latest = merge_into_latest({"groups": {}}, document, ["test"], "results/x.json")
    table = render_group("test", latest["groups"]["test"], chart_exists=False)
    assert "| idle h2c | rush | 8.00 KiB |" in table
    assert [row["scenario"] for row in headline_rows(latest)] == ["test: GET /"]


needs_h2load = pytest.mark.skipif(shutil.which("h2load") is None, reason="h2load missing (make test-tools)")


def measure_on_rush(scenario: Scenario, tmp_path: Path) -> RunRecord:
    """One real run of ``scenario`` on rush, as the suite makes it (1 s, no warm-up)."""
    rush = next(server for server in SERVERS if server.name == "rush")
    settings = Settings(duration_s=1, warmup_s=0, repeat=1, log_dir=tmp_path, stop_timeout_s=5)
    return measure(PlannedRun(scenario, rush, 1), settings)


@needs_h2load
def test_an_http2_row_on_rush_counts_with_latency_and_h2loads_counts(tmp_path):
    hello = next(s for s in GROUPS["http2"] if s.name == "app-hello")
    record = measure_on_rush(replace(hello, connections=4, streams=4), tmp_path)
    assert record.ok, record.failure
    assert record.h2load_counts["protocol"] == "h2c" and record.h2load_counts["failed"] == 0
    assert record.requests > 0 and record.cpu_us_per_request and record.p99_ms
    assert not list(tmp_path.glob("*.tsv")), "request logs are removed once read"


@needs_h2load
def test_a_wrong_answer_over_h2_refuses_the_row_before_any_timing(tmp_path):
    hello = next(s for s in GROUPS["http2"] if s.name == "app-hello")
    wrong = replace(hello, expect=Expectation(body=b"Hello, Wrong!"), connections=2, streams=2)
    record = measure_on_rush(wrong, tmp_path)
    assert not record.ok and "over h2c" in record.failure and "Hello, Wrong!" in record.failure
    assert record.requests == 0 and record.requests_per_second is None


@needs_h2load
def test_h2load_errors_under_load_refuse_the_row(tmp_path):
    # The answer check passes (its path is the right one), but the load also asks, in turn, a path
    # that answers 404 (h2load takes a second URI's path only): those answers fail, and the row
    # gets no number.
    hello = next(s for s in GROUPS["http2"] if s.name == "app-hello")
    broken = replace(hello, connections=2, streams=2, wrk_args=("http://127.0.0.1:1/no/such/page",))
    record = measure_on_rush(broken, tmp_path)
    assert not record.ok and "failed requests" in record.failure and "4xx" in record.failure
    assert record.h2load_counts["failed"] > 0 and record.requests_per_second > 0, "measured, then refused"


def test_an_http1_only_server_fails_the_h2_check():
    hello = next(s for s in GROUPS["http2"] if s.name == "app-hello")
    with CannedServer(plain(b"Hello, World!")) as server, pytest.raises(CheckFailed, match="over h2c"):
        check_h2_scenario(hello, "127.0.0.1", server.port, timeout=2)


def test_idle_h2_connections_are_held_and_measured_on_rush(tmp_path):
    idle = next(s for s in GROUPS["http2"] if s.name == "idle-1000")
    record = measure_on_rush(replace(idle, connections=50), tmp_path)
    assert record.ok, record.failure
    assert record.idle_connections == 50 and record.rss_per_connection_bytes is not None


def test_h2c_rows_are_compared_with_their_http1_twins():
    h2 = Scenario(name="x", group="test", title="h2c: GET /", path="/", expect=Expectation(), load="h2load")
    h1 = Scenario(name="x-h1", group="test", title="HTTP/1.1: GET /", path="/", expect=Expectation(), load="h2load-h1")
    records = [run("rush", 1, 120.0, scenario=h2.key), run("rush", 1, 100.0, scenario=h1.key)]
    records[0].cpu_us_per_request, records[1].cpu_us_per_request = 6.0, 5.0
    latest = merge_into_latest({"groups": {}}, results_for(records, [h2, h1]), ["test"], "results/x.json")
    table = render_group("test", latest["groups"]["test"], chart_exists=False)
    assert "| GET / | rush | 1.20x | 1.20x |" in table


# --- the http3 group: h3-load's reports and their refusals -------------------------------------

# Real h3-load reports (against hypercorn --quic-bind): a 13-byte body checked against 12 bytes,
# and a handshakes run whose normal client was still waiting when the run ended.
H3LOAD_WRONG_LENGTH = (
    '{"mode": "load", "valid": false, "connections": 2, "streams": 2, "duration_s": 1.000, "requests": 1037, '
    '"ok": 0, "wrong_status": 0, "wrong_length": 1037, "statuses": {"200": 1037}, "errors": {}, "error_total": 0, '
    '"bytes": 13481, "requests_per_second": null, "latency_ms": {"p50": 2.196, "p75": 4.081, "p90": 7.409, '
    '"p99": 24.712, "max": 28.406}}'
)
H3LOAD_HANDSHAKES = (
    '{"mode": "handshakes", "valid": true, "connections": 16, "streams": 1, "duration_s": 3.000, "requests": 609, '
    '"ok": 609, "wrong_status": 0, "wrong_length": 0, "statuses": {"200": 609}, "errors": {}, "error_total": 0, '
    '"bytes": 7917, "requests_per_second": 203.0, "latency_ms": {"p50": 5.1, "p75": 9.0, "p90": 30.2, "p99": 1014.1, '
    '"max": 1079.2}, "handshakes": 609, "late": 0, "probe": {"requests": 68, "failed": 0, "timeouts": 0, '
    '"unfinished": 1, "latency_ms": {"p50": 6.778, "p75": 9.913, "p90": 19.92, "p99": 794.867, "max": 794.867}}}'
)


def test_h3load_reports_are_judged_and_the_handshake_rows_show_the_normal_client():
    hello = next(s for s in GROUPS["http3"] if s.name == "asgi-hello")
    handshakes = next(s for s in GROUPS["http3"] if s.name == "handshakes")
    wrong = parse_load_output(hello, H3LOAD_WRONG_LENGTH)
    assert "1037 bodies of the wrong length" in wrk_failure(wrong, hello)
    result = parse_load_output(handshakes, H3LOAD_HANDSHAKES)
    assert wrk_failure(result, handshakes) is None
    record = RunRecord(scenario=handshakes.key, server="rush", repeat=1)
    record.take_wrk(result, handshakes)
    # The row's latency is the normal client's, not the flood's; the flood's counts are kept.
    assert (record.requests_per_second, record.p99_ms) == (203.0, 794.867)
    assert record.h3load_counts["probe"]["unfinished"] == 1 and record.h3load_counts["latency_ms"]["p99"] == 1014.1
    failed_probe = H3LOAD_HANDSHAKES.replace('"failed": 0', '"failed": 2')
    assert "2 of the normal client's" in wrk_failure(parse_load_output(handshakes, failed_probe), handshakes)
    # What h3-load is told: the CA, HTTPS, the body's length where the scenario knows it, the rate.
    file_1m = next(s for s in GROUPS["http3"] if s.name == "file-1m")
    argv = wrk_command(file_1m, "http://127.0.0.1:8443", 10)
    assert argv[argv.index("--expect-length") + 1] == str(1024 * 1024) and argv[-1].startswith("https://")
    assert "--rate" in wrk_command(next(s for s in GROUPS["http3"] if s.name == "handshakes-1000"), "http://h:1", 1)
