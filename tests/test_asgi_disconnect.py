"""ASGI apps that watch for the client leaving (issue 20, faults 1 and 2),
each run under rush and under uvicorn (httptools, uvloop), the oracle: what
the client reads and what the app saw must be the same.

* ``receive()`` called by two tasks at once (Starlette's disconnect
  listener and ``request.is_disconnected()``): each call waits on its own,
  cancelling one neither cancels the other nor loses a message.
* A stream that checks ``is_disconnected()`` runs until the client leaves
  (Starlette ``StreamingResponse``, sse-starlette ``EventSourceResponse``),
  and the app learns that it left.
* ``is_disconnected()`` in a generator's ``finally`` keeps the last chunk.
* A client leaving a stream is normal: nothing is logged at ERROR.

The apps are in tests/apps/disconnect_apps.py; they report what they saw in
marker files, which the tests wait for.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import PYTHON, Connection, RushServer, ServerFactory, clean_environment, request, wait_for

SERVERS = ["rush", "uvicorn"]
# Events read before the client leaves: well past the two the old receive() survived.
EVENTS_BEFORE_LEAVING = 25


class Served:
    """A server of tests/apps/disconnect_apps.py and its marker directory."""

    def __init__(self, server: RushServer, markers: Path, kind: str) -> None:
        self.server = server
        self.markers = markers
        self.kind = kind

    def marker(self, name: str) -> str:
        path = self.markers / name
        wait_for(path.exists, f"the app to write {name}\n{self.server.describe()}")
        return path.read_text()


def start_uvicorn(rush_server: ServerFactory, app: str, env: dict[str, str]) -> Iterator[RushServer]:
    """``app`` under uvicorn (httptools, uvloop), stopped at the end; uvicorn
    ends itself by re-raising SIGTERM, which is its clean exit."""
    command = [str(PYTHON), "-m", "uvicorn", "--loop", "uvloop", "--http", "httptools"]
    server = rush_server(app, env=env, command=command)
    yield server
    assert server.stop() in (0, -signal.SIGTERM), server.describe()


@pytest.fixture(params=SERVERS)
def served(request: pytest.FixtureRequest, rush_server: ServerFactory, tmp_path: Path) -> Iterator[Served]:
    markers = tmp_path / "markers"
    markers.mkdir()
    env = clean_environment({"RUSHTEST_MARKER_DIR": str(markers)})
    if request.param == "rush":
        yield Served(rush_server("disconnect_apps", "--access-log", env=env), markers, "rush")
    else:
        for server in start_uvicorn(rush_server, "disconnect_apps", env):
            yield Served(server, markers, "uvicorn")


def read_until_match(connection: Connection, pattern: bytes) -> bytes:
    """Reads until ``pattern`` (a regex) matches what arrived, within the guard
    timeout; returns the match."""
    deadline = time.monotonic() + connection.timeout
    while (found := re.search(pattern, connection.buffer)) is None:
        if not connection._recv(deadline):
            raise AssertionError(f"connection closed before {pattern!r}; got {connection.buffer[-300:]!r}")
    return found.group()


def read_until(connection: Connection, wanted: bytes) -> None:
    read_until_match(connection, re.escape(wanted))


def assert_quiet(served: Served) -> None:
    """Nothing at ERROR (nor a traceback) in the server's log."""
    text = served.server.stderr_text()
    assert "ERROR" not in text and "Traceback" not in text, served.server.describe()


def leave_stream(served: Served, target: str, last_event: bytes) -> None:
    """Reads a stream up to ``last_event``, then leaves."""
    with served.server.connect() as connection:
        connection.send(request("GET", target))
        read_until(connection, last_event)


def test_receive_calls_wait_independently(served: Served) -> None:
    with served.server.connect() as connection:
        connection.send(request("GET", "/raw/concurrent"))
        report = read_until_match(connection, rb"same=\w+ keeper_cancelled=\w+ keeper_done=\w+\n")
        assert report == b"same=False keeper_cancelled=False keeper_done=False\n"
    # The surviving receive() hears that the client left.
    assert served.marker("concurrent-0") == "http.disconnect"


def test_receive_after_the_response_says_disconnect(served: Served) -> None:
    """Once the response is complete, receive() says http.disconnect at once
    (the ASGI spec's words, and uvicorn's behaviour), even before the request
    body was read, while the client keeps its connection open."""
    with served.server.connect() as connection:
        connection.send(request("GET", "/raw/after-response"))
        assert connection.read_response().body == b"done\n"
        assert served.marker("after-response-0") == "http.disconnect,http.disconnect"
        connection.send(request("GET", "/raw/after-response"))
        assert connection.read_response().body == b"done\n"


def test_a_cancelled_receive_loses_no_body(served: Served) -> None:
    with served.server.connect() as connection:
        connection.send(b"POST /raw/cancelled-then-body HTTP/1.1\r\nHost: test\r\nContent-Length: 5\r\n\r\n")
        read_until(connection, b"ready\n")
        connection.send(b"hello")
        response = connection.read_response("POST")
    assert (response.status, response.body) == (200, b"ready\ngot hello\n")
    assert_quiet(served)


def test_starlette_stream_runs_until_the_client_leaves(served: Served) -> None:
    leave_stream(served, "/stream?id=1", b"event %d\n" % EVENTS_BEFORE_LEAVING)
    outcome, count = served.marker("stream-1").split()
    assert outcome in ("disconnected", "closed") and int(count) > EVENTS_BEFORE_LEAVING
    if served.kind == "rush":
        # The app has returned and its request is over (the access line is written last).
        served.server.wait_for_log(r"GET /stream\?id=1 HTTP/1.1", stream="stdout")
    assert_quiet(served)


def test_sse_starlette_streams_until_the_client_leaves(served: Served) -> None:
    leave_stream(served, "/sse?id=2", b"data: %d\r\n" % EVENTS_BEFORE_LEAVING)
    outcome, count = served.marker("sse-2").split()
    assert outcome in ("disconnected", "closed") and int(count) > EVENTS_BEFORE_LEAVING
    if served.kind == "rush":
        served.server.wait_for_log(r"GET /sse\?id=2 HTTP/1.1", stream="stdout")
    assert_quiet(served)


def test_an_app_returning_unfinished_while_the_client_waits_is_an_error(served: Served) -> None:
    with served.server.connect() as connection:
        connection.send(request("GET", "/raw/unfinished"))
        result = connection.read_until_close()
    assert b"part\n" in result.leftover and not result.responses
    served.server.wait_for_log(r"ERROR.*(returned before finishing|returned without completing)")


def test_is_disconnected_in_finally_keeps_the_last_chunk(served: Served) -> None:
    with served.server.connect() as connection:
        for index in range(3):
            connection.send(request("GET", f"/finite?n=5&id={index}"))
            response = connection.read_response()
            assert response.status == 200
            assert response.body == b"".join(b"chunk %d\n" % chunk for chunk in range(5))
            assert served.marker(f"finite-{index}") == "finished 5"
    assert_quiet(served)
