"""ASGI 3 (issue 4) over real sockets, with raw ASGI apps (tests/apps/asgi_apps.py):
interface detection and its startup log line; the ``http`` scope (type, asgi
version, http_version, method, scheme, decoded path, raw_path, query_string,
root_path, lower-cased byte-pair headers, client, server, lifespan state
copied per request); ``receive`` (the whole body in one ``http.request``, for
Content-Length and chunked bodies, then ``http.disconnect`` once the response
is complete); ``send`` (buffered and streaming bodies, chunked without a
Content-Length, raw with one, really streamed while the app waits); lifespan
(startup and shutdown with state and markers, ``--lifespan auto|on|off``, a
failed startup stopping rush with the app's message, apps without lifespan
support); protocol violations answered with a logged 500 or a closed
connection, never a malformed response; ``--max-body-size``; and apps that
really suspend keeping pipelined responses in order while other connections
are served.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import (
    CloseResult,
    HTTPResponse,
    IncompleteResponse,
    RushServer,
    ServerFactory,
    chunked,
    clean_environment,
    parse_one,
    request,
    wait_for,
)

APP = "tests.apps.asgi_apps:app"
MIB = 1024 * 1024


def fetch(
    server: RushServer,
    target: str,
    headers: list[tuple[str, str]] | None = None,
    method: str = "GET",
    body: bytes = b"",
) -> HTTPResponse:
    with server.connect() as connection:
        connection.send(request(method, target, headers, body))
        return connection.read_response(method)


def chunked_request(target: str, *pieces: bytes, close: bool = False) -> bytes:
    headers = [("Transfer-Encoding", "chunked")] + ([("Connection", "close")] if close else [])
    return request("POST", target, headers, chunked(*pieces), content_length=False)


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("asgi-markers")


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, markers: Path) -> RushServer:
    return module_servers(APP, env=clean_environment({"RUSHTEST_MARKER_DIR": str(markers)}))


@pytest.fixture(scope="module")
def client(server: RushServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=15) as http:
        yield http


def scope_of(server: RushServer, target: str = "/scope", **options: object) -> dict:
    response = fetch(server, target, **options)  # type: ignore[arg-type]
    assert response.status == 200, response
    return response.json()


# ---------------------------------------------------------------------------
# Detection


def test_an_async_function_is_detected_as_asgi_and_logged(server: RushServer) -> None:
    server.wait_for_log(r"serving tests\.apps\.asgi_apps:app as an ASGI app")


@pytest.mark.parametrize("args", [(), ("--interface", "asgi")])
def test_an_object_with_async_call_is_asgi(rush_server: ServerFactory, args: tuple[str, ...]) -> None:
    server = rush_server("tests.apps.asgi_apps:instance_app", *args)
    server.wait_for_log(r"serving tests\.apps\.asgi_apps:instance_app as an ASGI app")
    assert fetch(server, "/x/y").body == b"instance app at /x/y"


# ---------------------------------------------------------------------------
# The http scope


def test_scope_keys(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/scope/caf%C3%A9%20x?a=1&b=%20two", [("X-Mixed-Case", "Value")]))
        scope = connection.read_response().json()
        client_port = connection.sock.getsockname()[1]
    assert scope["type"] == "http"
    assert scope["asgi"]["version"] == "3.0"
    assert scope["asgi"]["spec_version"].startswith("2.")
    assert scope["http_version"] == "1.1"
    assert scope["method"] == "GET"
    assert scope["scheme"] == "http"
    assert scope["path"] == "/scope/caf\u00e9 x"
    assert scope["raw_path"] == "/scope/caf%C3%A9%20x"  # bytes, shown as latin-1 text
    assert scope["query_string"] == "a=1&b=%20two"
    assert scope["root_path"] == ""
    assert scope["client"] == ["127.0.0.1", client_port]
    assert scope["server"] == ["127.0.0.1", server.port]
    assert ["host", "test"] in scope["headers"]
    assert ["x-mixed-case", "Value"] in scope["headers"]


def test_scope_types(server: RushServer) -> None:
    """The real types, checked by the app itself through its JSON rendering:
    bytes come out as latin-1 text, so compare a non-ASCII raw_path."""
    scope = scope_of(server, "/scope/%E2%9C%93")
    assert scope["path"] == "/scope/\u2713"
    assert scope["raw_path"] == "/scope/%E2%9C%93"


def test_scope_headers_are_lower_cased_byte_pairs_in_order(server: RushServer) -> None:
    headers = [("X-Dup", "a"), ("Accept", "text/html"), ("X-Dup", "b"), ("X_Under", "kept?")]
    scope = scope_of(server, headers=headers)
    pairs = [tuple(pair) for pair in scope["headers"]]
    assert pairs[0] == ("host", "test")
    assert [pair for pair in pairs if pair[0] == "x-dup"] == [("x-dup", "a"), ("x-dup", "b")]
    assert ("accept", "text/html") in pairs
    assert all(name == name.lower() for name, _ in pairs)


def test_absolute_form_target_sets_the_host_header(server: RushServer) -> None:
    # RFC 9112 3.2.2: the target's authority is the host; the Host field is ignored.
    with server.connect() as connection:
        connection.send(b"GET http://other.example:8080/scope/x?a=1 HTTP/1.1\r\nHost: test\r\n\r\n")
        scope = connection.read_response().json()
    assert [pair for pair in scope["headers"] if pair[0] == "host"] == [["host", "other.example:8080"]]
    assert scope["path"] == "/scope/x"
    assert scope["raw_path"] == "/scope/x"
    assert scope["query_string"] == "a=1"


def test_scope_key_order(server: RushServer) -> None:
    # The order rush has always built it in; "state" (lifespan) is left out by the app.
    assert list(scope_of(server)) == [
        "type",
        "asgi",
        "http_version",
        "method",
        "scheme",
        "path",
        "raw_path",
        "query_string",
        "root_path",
        "headers",
        "client",
        "server",
        "extensions",
        "has_state",
    ]


def test_an_app_changing_its_scope_leaves_the_next_one_alone(server: RushServer) -> None:
    """Every scope starts from one per-worker template: an app changing its
    own scope in place must not change the template."""
    with server.connect() as connection:
        connection.send(request("GET", "/taint-scope"))
        assert connection.read_response().json() == {"tainted": True}
        connection.send(request("GET", "/scope"))
        scope = connection.read_response().json()
    assert scope["scheme"] == "http"
    assert "tainted" not in scope
    assert ["x-tainted", "1"] not in scope["headers"]


@pytest.mark.parametrize("method", ["GET", "PATCH", "OPTIONS", "PROPFIND"])
def test_scope_method_as_sent(server: RushServer, method: str) -> None:
    assert scope_of(server, method=method)["method"] == method


@pytest.mark.parametrize("suspend", [False, True], ids=["inline", "suspended"])
def test_awaiting_receive_and_send_gives_the_message_and_none(server: RushServer, suspend: bool) -> None:
    target = "/await-results?suspend=1" if suspend else "/await-results"
    response = fetch(server, target, method="POST", body=b"payload")
    assert response.status == 200, response
    assert response.json() == {
        "received": {"type": "http.request", "body": "payload", "more_body": False},
        "started": "None",
    }


@pytest.mark.parametrize("shape", ["list", "tuple", "generator", "subclass", "bytearray"])
def test_response_headers_in_any_iterable_of_byte_pairs(server: RushServer, shape: str) -> None:
    response = fetch(server, f"/header-shapes?shape={shape}")
    assert response.status == 200, response
    assert response.header("x-shape") == shape
    assert response.body == b"shaped"


def test_every_request_runs_as_a_task_also_when_pipelined(server: RushServer) -> None:
    """Requests answered in one pass of the loop (pipelined on one
    connection, and on two at once) each run as an asyncio task, one that
    suspends included; and asyncio's own tasks run between passes (the
    suspended request is answered)."""
    targets = ["/current-task", "/current-task", "/current-task?suspend=1", "/current-task"]
    pipelined = b"".join(request("GET", target) for target in targets)
    with server.connect() as first, server.connect() as second:
        first.send(pipelined)
        second.send(pipelined)
        for connection in (first, second):
            for _ in targets:
                response = connection.read_response()
                assert response.status == 200, response
                assert response.json() == {"task": True, "same": True}


def test_send_takes_its_message_as_uvicorns_does(server: RushServer) -> None:
    """``send`` is a native function: wrong calls raise TypeError (the app
    goes on), ``message=`` works as a keyword, and message keys that are
    not the interned literals are read by their text."""
    response = fetch(server, "/send-calls")
    assert response.status == 200, response
    assert response.header("content-type") == "application/json"
    assert response.json() == {
        "no-argument": "TypeError",
        "two-arguments": "TypeError",
        "list": "TypeError",
        "none": "TypeError",
    }


def test_scope_for_http10_and_methods(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/scope", version="HTTP/1.0"))
        result = connection.read_until_close()
    assert result.responses[0].json()["http_version"] == "1.0"
    assert scope_of(server, method="POST", body=b"x")["method"] == "POST"
    assert scope_of(server, method="DELETE")["method"] == "DELETE"


def test_root_path(rush_server: ServerFactory) -> None:
    server = rush_server(APP, "--root-path", "/api")
    scope = scope_of(server, "/api/scope?x=1")
    assert scope["root_path"] == "/api"
    # The path keeps the prefix (what Starlette and uvicorn expect); the app strips root_path to route.
    assert scope["path"] == "/api/scope"
    assert scope["raw_path"] == "/api/scope"


# ---------------------------------------------------------------------------
# Lifespan and state


def test_lifespan_startup_state_reaches_requests(server: RushServer, markers: Path) -> None:
    assert (markers / "startup").exists()
    assert fetch(server, "/scope").json()["has_state"] is True
    state = fetch(server, "/state").json()
    assert state == {"keys": ["greeting", "shared"], "greeting": "hello from startup"}


def test_state_is_copied_for_each_request(server: RushServer) -> None:
    assert fetch(server, "/state?add=1").json()["keys"] == ["greeting", "shared"]
    # What one request added to its copy is not seen by the next one.
    assert fetch(server, "/state").json()["keys"] == ["greeting", "shared"]


def test_lifespan_shutdown_runs_on_sigterm(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = rush_server(APP, env=clean_environment({"RUSHTEST_MARKER_DIR": str(tmp_path)}))
    worker = server.single_worker()
    assert (tmp_path / "startup").read_text() == str(worker)
    assert not (tmp_path / "shutdown").exists()
    assert server.stop(signal.SIGTERM) == 0
    assert (tmp_path / "shutdown").read_text() == str(worker)


def test_lifespan_off(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = rush_server(APP, "--lifespan", "off", env=clean_environment({"RUSHTEST_MARKER_DIR": str(tmp_path)}))
    # The scope still has a state, empty (uvicorn's too: apps may count on the key).
    assert fetch(server, "/state").json() == {"keys": [], "greeting": None}
    assert server.stop() == 0
    assert not (tmp_path / "startup").exists()
    assert not (tmp_path / "shutdown").exists()


def test_app_without_lifespan_support_runs_in_auto_mode(rush_server: ServerFactory) -> None:
    server = rush_server("tests.apps.asgi_apps:no_lifespan_app")
    assert fetch(server, "/").body == b"no lifespan here"
    assert fetch(server, "/state").body == b"state {}"
    server.wait_for_log("does not support ASGI lifespan")


def test_app_without_lifespan_support_fails_with_lifespan_on(rush_server: ServerFactory) -> None:
    server = rush_server(
        "tests.apps.asgi_apps:no_lifespan_app", "--lifespan", "on", wait=False, allow_worker_deaths=True
    )
    assert server.wait_exit() != 0
    assert "this app only speaks http" in server.stderr_text()


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_failed_startup_stops_rush_with_the_message(rush_server: ServerFactory, mode: str) -> None:
    server = rush_server(
        "tests.apps.asgi_apps:failing_startup_app", "--lifespan", mode, wait=False, allow_worker_deaths=True
    )
    assert server.wait_exit() != 0
    assert "the database is unreachable (test)" in server.stderr_text()


# ---------------------------------------------------------------------------
# receive


def test_body_in_one_message(client: httpx.Client) -> None:
    messages = client.post("/echo", content=b"hello body").json()
    assert messages == [{"type": "http.request", "length": 10, "more_body": False, "head": "hello body"}]


def test_empty_body(client: httpx.Client) -> None:
    messages = client.get("/echo").json()
    assert messages == [{"type": "http.request", "length": 0, "more_body": False, "head": ""}]


def test_chunked_body(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(chunked_request("/echo", b"first;", b"second;", b"third"))
        messages = connection.read_response().json()
    assert messages[-1]["more_body"] is False
    assert sum(message["length"] for message in messages) == len(b"first;second;third")
    assert "".join(message["head"] for message in messages) == "first;second;third"


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_body(server: RushServer, framing: str) -> None:
    body = os.urandom(MIB) * 3
    if framing == "chunked":
        raw = chunked_request(
            "/echo-hash", *[body[offset : offset + 200_000] for offset in range(0, len(body), 200_000)]
        )
    else:
        raw = request("POST", "/echo-hash", body=body)
    with server.connect() as connection:
        connection.send(raw)
        echoed = connection.read_response().json()
    assert echoed == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_body_limit_applies(rush_server: ServerFactory) -> None:
    server = rush_server(APP, "--max-body-size", "1000")
    assert fetch(server, "/echo", method="POST", body=b"x" * 1000).json()[0]["length"] == 1000
    for raw in (
        request("POST", "/echo", [("Connection", "close")], b"x" * 1001),
        chunked_request("/echo", b"y" * 600, b"y" * 600, close=True),
    ):
        with server.connect() as connection:
            connection.send(raw)
            result = connection.read_until_close()
        assert [response.status for response in result.responses] == [413]


def test_disconnect_after_the_response(server: RushServer) -> None:
    response = fetch(server, "/disconnect?id=d1")
    assert response.body == b"responded"
    records = wait_for(
        lambda: (found := fetch(server, "/events?id=d1").json()) and len(found) == 4 and found,
        "the app to record its receive() results",
    )
    # A receive() waiting since before the response resolves only once it is complete.
    assert records == [
        "http.request",
        "response sent",
        "early receive got http.disconnect",
        "late receive got http.disconnect",
    ]


def test_client_leaving_mid_stream_is_a_disconnect(server: RushServer) -> None:
    key = f"gone-{os.urandom(4).hex()}"
    try:
        with server.connect() as connection:
            connection.send(request("GET", f"/stream-until-disconnect?id={key}"))
            while b"first chunk;" not in connection.buffer:
                data = connection.sock.recv(65536)
                assert data, f"closed before the first chunk: {connection.buffer!r}"
                connection.buffer += data
        # The client is gone: the app waiting in receive() must hear about it.
        wait_for(
            lambda: fetch(server, f"/events?id={key}").json() == ["streaming", "http.disconnect"],
            "the app to receive http.disconnect",
            timeout=3,
        )
    finally:
        fetch(server, f"/release/{key}")


# ---------------------------------------------------------------------------
# send


@pytest.mark.parametrize("suspend", [False, True])
def test_streamed_body_without_length_is_chunked(server: RushServer, suspend: bool) -> None:
    target = "/stream?chunks=5" + ("&suspend=1" if suspend else "")
    response = fetch(server, target)
    assert response.status == 200
    assert response.body == b"".join(f"chunk {number};".encode() for number in range(5))
    framing = (response.header("transfer-encoding"), response.header("content-length"))
    if suspend:
        assert framing == ("chunked", None)
    else:
        # Everything was sent before the app suspended: buffered, either framing is fine, one only.
        assert (framing[0] is None) != (framing[1] is None)


@pytest.mark.parametrize("suspend", [False, True])
def test_streamed_body_with_length_is_sent_raw(server: RushServer, suspend: bool) -> None:
    target = "/stream?chunks=4&length=1" + ("&suspend=1" if suspend else "")
    with server.connect() as connection:
        connection.send(request("GET", target) + request("GET", "/scope"))
        response, after = connection.read_responses(2)
    expected = b"".join(f"chunk {number};".encode() for number in range(4))
    assert response.header("content-length") == str(len(expected))
    assert response.header("transfer-encoding") is None
    assert response.body == expected
    assert after.json()["path"] == "/scope"


def test_streaming_really_streams(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/stream-held?key=s1"))
        # The first chunk arrives while the app still waits for the release.
        while b"first chunk;" not in connection.buffer:
            data = connection.sock.recv(65536)
            assert data, f"closed before the first chunk: {connection.buffer!r}"
            connection.buffer += data
        assert b"second chunk" not in connection.buffer
        assert fetch(server, "/release/s1").body == b"released"
        response = connection.read_response()
    assert response.header("transfer-encoding") == "chunked"
    assert response.body == b"first chunk;second chunk"


def test_large_streamed_response(server: RushServer) -> None:
    size = 5 * MIB + 3
    response = fetch(server, f"/big?size={size}")
    assert response.header("transfer-encoding") == "chunked"
    assert len(response.body) == size
    assert response.body == (bytes(range(256)) * 256 * 81)[:size]


def test_head_gets_no_body(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(
            request("HEAD", "/scope") + request("HEAD", "/stream?chunks=3&suspend=1") + request("GET", "/cookies")
        )
        head, streamed_head, cookies = connection.read_responses(3, ["HEAD", "HEAD", "GET"])
    assert head.status == 200 and head.body == b""
    assert streamed_head.status == 200 and streamed_head.body == b""
    assert cookies.body == b"cookies"
    assert cookies.header_list("set-cookie") == ["a=1", "b=2"]


# ---------------------------------------------------------------------------
# Suspending apps: concurrency and pipelining


def test_pipelined_responses_keep_their_order(server: RushServer) -> None:
    targets = [
        "/sleep?ms=40&id=1",
        "/sleep?ms=1&id=2",
        "/scope?id=3",
        "/sleep?ms=15&id=4",
        "/stream?chunks=2&suspend=1",
    ]
    with server.connect() as connection:
        connection.send(b"".join(request("GET", target) for target in targets))
        responses = connection.read_responses(len(targets))
    assert [response.json()["id"] for response in responses[:2]] == ["1", "2"]
    assert responses[2].json()["query_string"] == "id=3"
    assert responses[3].json()["id"] == "4"
    assert responses[4].body == b"chunk 0;chunk 1;"


def test_a_waiting_app_does_not_hold_up_other_connections(server: RushServer) -> None:
    with server.connect() as waiting:
        waiting.send(request("GET", "/wait/w1") + request("GET", "/scope?after=w1"))
        for number in range(3):
            assert fetch(server, f"/scope?n={number}").status == 200
        assert waiting.nothing_arrives(0)
        assert fetch(server, "/release/w1").body == b"released"
        first, second = waiting.read_responses(2)
    assert first.json() == {"waited": "w1"}
    assert second.json()["query_string"] == "after=w1"


# ---------------------------------------------------------------------------
# Protocol violations: a logged 500 or a closed connection, never a malformed response

VIOLATIONS = [
    "start-twice",
    "body-before-start",
    "crlf-value",
    "crlf-name",
    "too-long",
    "too-long-later",
    "too-short",
    "start-only",
    "unfinished-stream",
    "no-response",
    "raise-before-start",
    "raise-after-start",
    "raise-mid-stream",
    "bad-status",
    "str-body",
    "unknown-message",
]
SUSPEND = pytest.mark.parametrize("suspend", [False, True], ids=["immediate", "suspended"])


def violation_target(kind: str, suspend: bool, marker: str) -> str:
    return f"/violation?kind={kind}&m={marker}" + ("&suspend=1" if suspend else "")


def assert_refused(result: CloseResult, after_path: str = "/scope") -> None:
    """A 500 (then, if the connection was kept, the next response intact), or
    a connection closed before the broken response was complete."""
    if result.responses:
        first = result.responses[0]
        assert first.status == 500, f"a violation answered with {first!r}"
        assert result.leftover == b"", f"bytes after the 500: {result.leftover[:300]!r}"
        for response in result.responses[1:]:
            assert response.status == 200
            assert response.json()["path"] == after_path
        return
    # Closed: what came (if anything) must be visibly incomplete, never a whole response.
    if result.leftover:
        assert result.leftover.startswith(b"HTTP/1.1 "), result.leftover[:300]
        with pytest.raises(IncompleteResponse):
            parse_one(result.leftover, 0, "GET", at_eof=False)


@SUSPEND
@pytest.mark.parametrize("kind", VIOLATIONS)
def test_protocol_violations(server: RushServer, kind: str, suspend: bool) -> None:
    with server.connect() as connection:
        connection.send(
            request("GET", violation_target(kind, suspend, "wire"))
            + request("GET", "/scope", [("Connection", "close")])
        )
        result = connection.read_until_close()
    assert_refused(result)
    assert b"x-injected" not in b"".join(response.raw_head for response in result.responses).lower()
    # The worker is fine afterwards.
    assert fetch(server, "/scope").status == 200


def logged_after(server: RushServer, target: str) -> bool:
    """Whether the worker logged something naming ``target``, checked once the
    worker has logged a later error (its log is written in order)."""
    barrier = f"barrier-{os.urandom(4).hex()}"
    assert fetch(server, f"/violation?kind=raise-before-start&m={barrier}").status == 500
    server.wait_for_log(re.escape(barrier))
    return target in server.stderr_text()


@SUSPEND
@pytest.mark.parametrize(
    "kind",
    [
        "start-twice",
        "body-before-start",
        "crlf-value",
        "crlf-name",
        "too-long",
        "too-long-later",
        "too-short",
        "start-only",
        "unfinished-stream",
        "no-response",
        "raise-before-start",
        "raise-after-start",
        "raise-mid-stream",
        "bad-status",
        "str-body",
        "unknown-message",
    ],
)
def test_protocol_violations_are_logged(server: RushServer, kind: str, suspend: bool) -> None:
    target = violation_target(kind, suspend, f"log-{os.urandom(4).hex()}")
    with server.connect() as connection:
        connection.send(request("GET", target, [("Connection", "close")]))
        connection.read_until_close()
    assert logged_after(server, target), f"nothing in the log names {target}"


@SUSPEND
def test_body_after_the_end(server: RushServer, suspend: bool) -> None:
    """A body message after the final one: the response stays intact if it was
    already written, or becomes a 500 if it was not; nothing malformed either way."""
    with server.connect() as connection:
        connection.send(
            request("GET", violation_target("body-after-complete", suspend, "end"))
            + request("GET", "/scope", [("Connection", "close")])
        )
        result = connection.read_until_close()
    assert result.leftover == b""
    first = result.responses[0]
    assert (first.status, first.body) in ((200, b"complete"), (500, b"Internal Server Error"))
    assert b"after the end" not in first.body
    for response in result.responses[1:]:
        assert json.loads(response.body)["path"] == "/scope"


@pytest.mark.parametrize(
    "suspend",
    [
        False,
        True,
    ],
    ids=["immediate", "suspended"],
)
def test_exception_after_a_complete_response_keeps_the_response(server: RushServer, suspend: bool) -> None:
    target = violation_target("raise-after-complete", suspend, f"after-{os.urandom(4).hex()}")
    with server.connect() as connection:
        connection.send(request("GET", target) + request("GET", "/scope", [("Connection", "close")]))
        result = connection.read_until_close()
    assert result.leftover == b""
    first = result.responses[0]
    assert (first.status, first.body) == (200, b"complete")
    for response in result.responses[1:]:
        assert json.loads(response.body)["path"] == "/scope"


@pytest.mark.parametrize(
    "suspend",
    [
        False,
        True,
    ],
    ids=["immediate", "suspended"],
)
def test_exception_after_a_complete_response_is_logged(server: RushServer, suspend: bool) -> None:
    target = violation_target("raise-after-complete", suspend, f"logged-{os.urandom(4).hex()}")
    with server.connect() as connection:
        connection.send(request("GET", target, [("Connection", "close")]))
        connection.read_until_close()
    assert logged_after(server, target), f"nothing in the log names {target}"
