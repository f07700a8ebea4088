"""Workers renewed while serving, over real rush processes: ``--timeout``
(a worker whose loop is stuck in a blocking handler is killed and
replaced, logged with its request; one that waits in ``await``, or idles,
is not), ``--max-requests`` with its jitter (workers recycled gracefully,
one at a time, without a failed request), and the log lines of stopping
and retiring (a second Ctrl-C, the cause of each retirement).
"""

from __future__ import annotations

import re
import signal
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from rush.config import Config, OptionError
from support import Gate, RushServer, ServerFactory, clean_environment, request, wait_for

# An ASGI app whose /stuck handler blocks its worker's event loop (a
# synchronous sleep inside async code) until the test creates the release file.
BLOCKING_ASGI = """
import os
import time
from pathlib import Path


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/stuck":
        directory = Path(scope["query_string"].decode())
        (directory / "stuck.entered").write_text(str(os.getpid()))
        while not (directory / "stuck.release").exists():
            time.sleep(0.01)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": str(os.getpid()).encode()})
"""


def get_pid(server: RushServer, target: str = "/pid") -> int:
    with server.connect() as connection:
        connection.send(request("GET", target, [("Connection", "close")]))
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200], result
    return int(result.responses[0].body)


# ---------------------------------------------------------------------------
# --timeout


@pytest.mark.parametrize("via", ["flag", "env"])
def test_a_stuck_worker_is_killed_and_replaced_with_its_request_logged(
    rush_server: ServerFactory, tmp_path: Path, via: str
) -> None:
    if via == "flag":
        server = rush_server("basic", "--timeout", "2")
    else:
        server = rush_server("basic", env=clean_environment({"RUSH_TIMEOUT": "2"}))
    stuck = server.single_worker()
    gate = Gate(tmp_path, "stuck")
    try:
        with server.connect() as connection:
            connection.send(request("GET", gate.target))
            assert gate.wait_entered() == stuck
            # The handler never returns: the worker is killed, the request gets no answer.
            assert connection.read_until_close().responses == []
    finally:
        gate.release()
    server.wait_for_log(
        rf"worker {stuck} is stuck: its loop has not come back for [\d.]+ s \(--timeout 2 s\), last request begun: "
        + re.escape(repr(f"GET {gate.target} HTTP/1.1"))
        + "; killing it"
    )
    server.wait_for_log(rf"retired worker {stuck} exited \(signal SIGKILL\); it was retired: stuck for [\d.]+ s")
    # Its stack was printed before it was killed: the handler it was stuck in shows.
    server.wait_for_log(r'File ".*tests/apps/_shared\.py", line \d+ in wait_at_gate_blocking')
    replacement = server.single_worker()
    assert replacement != stuck
    assert get_pid(server) == replacement


def test_a_worker_stuck_in_async_code_is_killed_too(rush_server: ServerFactory, tmp_path: Path) -> None:
    (tmp_path / "blocking.py").write_text(textwrap.dedent(BLOCKING_ASGI))
    server = rush_server("blocking:app", "--app-dir", tmp_path, "--lifespan", "off", "--timeout", "2")
    stuck = get_pid(server, "/")
    try:
        with server.connect() as connection:
            connection.send(request("GET", f"/stuck?{tmp_path}"))
            wait_for((tmp_path / "stuck.entered").exists, "the handler to block")
            assert connection.read_until_close().responses == []
    finally:
        (tmp_path / "stuck.release").touch()
    server.wait_for_log(rf"worker {stuck} is stuck: .*last request begun: 'GET /stuck\?")
    server.wait_for_log(r'File ".*blocking\.py", line \d+ in app')
    assert get_pid(server, "/") != stuck


def test_waiting_in_await_or_idling_past_the_timeout_is_not_stuck(rush_server: ServerFactory) -> None:
    server = rush_server("async_app", "--timeout", "2")
    worker = server.single_worker()
    with server.connect() as connection:
        # 3 s in asyncio.sleep: the loop keeps coming back meanwhile.
        connection.send(request("GET", "/sleep?ms=3000"))
        assert connection.read_response().status == 200
    # The worker then idles with its keep-alive connection open: still fine.
    server.wait_for_log(r"serving on")
    assert server.worker_pids() == {worker}
    assert "is stuck" not in server.stderr_text()


def test_the_default_timeout_is_60_s_and_off_under_reload() -> None:
    assert Config.from_sources({"app": "a:b"}, {}).effective_timeout() == 60
    assert Config.from_sources({"app": "a:b", "reload": True}, {}).effective_timeout() == 0
    assert Config.from_sources({"app": "a:b", "reload": True}, {"RUSH_TIMEOUT": "30"}).effective_timeout() == 30
    assert Config.from_sources({"app": "a:b", "timeout": 0}, {}).effective_timeout() == 0


@pytest.mark.parametrize(
    ("options", "environment", "message"),
    [
        ({"timeout": 1}, {}, "--timeout must be 0 (off) or at least 2.0 s"),
        ({}, {"RUSH_TIMEOUT": "soon"}, "--timeout (from RUSH_TIMEOUT) must be a number"),
        ({"timeout": float("inf")}, {}, "--timeout must be a finite number of seconds"),
        ({}, {"RUSH_MAX_REQUESTS": "-1"}, "--max-requests (from RUSH_MAX_REQUESTS) must be between 0 and"),
        ({"max_requests_jitter": "5"}, {}, "--max-requests-jitter must be a whole number"),
    ],
)
def test_bad_lifecycle_values_are_refused(
    options: dict[str, object], environment: dict[str, str], message: str
) -> None:
    with pytest.raises(OptionError) as refused:
        Config.from_sources({"app": "a:b", **options}, environment)
    assert str(refused.value).startswith(message)


# ---------------------------------------------------------------------------
# --max-requests


@pytest.mark.parametrize("via", ["flag", "env"])
def test_max_requests_recycles_workers_one_at_a_time_without_failures(rush_server: ServerFactory, via: str) -> None:
    args = ["--workers", "2"]
    env = None
    if via == "flag":
        args += ["--max-requests", "20", "--max-requests-jitter", "5"]
    else:
        env = clean_environment({"RUSH_MAX_REQUESTS": "20", "RUSH_MAX_REQUESTS_JITTER": "5"})
    server = rush_server("basic", *args, bind="port", env=env)
    first = server.wait_for_workers(2)
    answered: set[int] = set()
    recycle = r"began \d+ requests \(--max-requests 20, (\d+) with its jitter\): replacing it"

    def recycled_three_times() -> bool:
        # Every request on a new connection, each of them answered (get_pid
        # fails otherwise), while workers are being replaced.
        for _ in range(10):
            answered.add(get_pid(server))
        return len(re.findall(recycle, server.stderr_text())) >= 3

    wait_for(recycled_three_times, "three workers recycled")
    limits = [int(limit) for limit in re.findall(r"--max-requests 20, (\d+) with its jitter", server.stderr_text())]
    assert all(20 <= limit <= 25 for limit in limits), limits
    assert answered - first, "requests were answered by recycled workers' successors"
    # Never two at once: each recycle's old worker is retired before the next recycle begins.
    events = re.findall(
        r"worker (\d+) began \d+ requests|retiring worker (\d+): replaced by worker \d+ \(--max-requests",
        server.stderr_text(),
    )
    recycling = None
    for began, retired in events:
        if began:
            assert recycling is None, f"worker {began} recycled while worker {recycling} was: {events}"
            recycling = began
        else:
            assert retired == recycling, events
            recycling = None
    current = server.wait_for_workers(2)
    assert len(current) == 2


def test_a_worker_stops_at_its_max_requests_and_its_successor_takes_over_without_a_failure(
    rush_server: ServerFactory,
) -> None:
    """The worker counts its own requests: none serves one past its limit,
    recycling happens within a burst of quick requests (the supervisor's
    half-second checkup saw none, or too late), and every request is
    answered meanwhile (get_pid fails otherwise)."""
    server = rush_server("basic", "--workers", "2", "--max-requests", "50", bind="port")
    first = server.wait_for_workers(2)
    served: Counter[int] = Counter(get_pid(server) for _ in range(200))
    assert set(served) - first, f"no worker was recycled within 200 requests: {served}"
    assert max(served.values()) <= 50, f"a worker served past its --max-requests: {served}"
    server.wait_for_log(r"began 50 requests \(--max-requests 50, 50 with its jitter\): replacing it")


# ---------------------------------------------------------------------------
# Stopping and retiring, in the log


@pytest.mark.parametrize(
    ("first", "said"), [(signal.SIGINT, "Ctrl-C pressed again"), (signal.SIGTERM, "SIGINT after SIGTERM")]
)
def test_a_second_interrupt_is_logged_as_what_it_is(
    rush_server: ServerFactory, tmp_path: Path, first: int, said: str
) -> None:
    server = rush_server("basic", "--graceful-timeout", "60")
    gate = Gate(tmp_path, "drain")
    try:
        with server.connect() as busy:
            busy.send(request("GET", gate.target))
            gate.wait_entered()
            server.send_signal(first)
            server.wait_for_log(
                rf"received {signal.Signals(first).name}: shutting down gracefully \(up to --graceful-timeout, 60 s"
            )
            server.send_signal(signal.SIGINT)
            assert busy.read_until_close().responses == []
        server.wait_for_log(
            rf"second interrupt \({said}\): stopping immediately, killing 1 worker\(s\) without waiting for their "
            "requests"
        )
        assert server.wait_exit() == 0
    finally:
        gate.release()


def test_retired_workers_are_logged_with_their_cause(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--workers", "2")
    server.wait_for_log(r"serving on")
    old = server.wait_for_workers(2)
    server.send_signal(signal.SIGHUP)
    server.wait_for_log("reload finished")
    for pid in old:
        server.wait_for_log(
            rf"retired worker {pid} exited \(exit code 0\); it was retired: replaced by worker \d+ \(SIGHUP\)"
        )
    server.send_signal(signal.SIGTTOU)
    server.wait_for_log(r"retired worker \d+ exited \(exit code 0\); it was retired: slot 1 removed \(SIGTTOU\)")
