"""Differential tests of how the app's ASGI messages may be written (apps/message_shapes.py):
each field written another way than the usual tuple of ``bytes``, under rush and under uvicorn
(httptools, and h11) and hypercorn. What all three references accept rush accepts, with the same
answer; what all three refuse rush refuses (a 500, or a WebSocket closed with 1011). Shapes the
references disagree on are compared with uvicorn (httptools) alone, where deliberate.toml lists
each of rush's own choices; docs/architecture.md ("ASGI") has the whole table."""

from __future__ import annotations

import socket
import time
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
from harness import Pair, Side, response_view, start_pair, websocket_url
from support import ServerFactory, request
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.differential.apps.message_shapes import HTTP, WS

REFERENCES = {
    "uvicorn-httptools": {"app": "message_shapes"},
    "uvicorn-h11": {"app": "message_shapes:app_h11", "reference_args": ["--http", "h11"]},
    "hypercorn": {"app": "message_shapes:app_hypercorn", "reference": "hypercorn"},
}
REFUSED_HTTP = [
    "header-three-items",
    "header-one-item",
    "headers-none",
    "header-value-crlf",
    "header-name-space",
    "status-missing",
    "status-99",
    "status-true",
    "body-str",
    "unknown-type",
]
DISPUTED_HTTP = [
    "header-memoryview-name",
    "header-str-name",
    "header-empty-name",
    "status-float",
    "status-600",
    "body-none",
    "body-list",
]
TRAILERS = ["trailers-not-offered", "trailers-not-offered-then-sent"]
HTTP2_TRAILERS = ["trailers-as-lists", "trailers-bytes-like", "trailers-in-two-messages", "trailer-three-items"]
HTTP2_HINTS = ["hints-bytes-like", "hints-padded", "hints-str", "header-value-padded"]
ODD_VIEWS = ["body-memoryview-strided", "body-memoryview-wide-items", "body-memoryview-2d"]
COMPARED_ELSEWHERE = {*REFUSED_HTTP, *DISPUTED_HTTP, *TRAILERS, *HTTP2_TRAILERS, *HTTP2_HINTS, *ODD_VIEWS}
ACCEPTED_HTTP = [name for name in HTTP if name not in COMPARED_ELSEWHERE]
REFUSED_WS = ["close-reason-bytes"]
DISPUTED_WS = [
    "accept-header-memoryview",
    "close-code-none",
    "close-code-str",
    "close-reason-too-long",
    "deny-without-headers",
]
ACCEPTED_WS = [name for name in WS if name not in [*REFUSED_WS, *DISPUTED_WS]]


@pytest.fixture(scope="module", params=list(REFERENCES))
def pair(request: pytest.FixtureRequest, module_servers: ServerFactory) -> Pair:
    options = dict(REFERENCES[request.param])
    return start_pair(module_servers, options.pop("app"), "asgi", **options)


def http_outcome(side: Side, name: str) -> dict[str, Any]:
    """The response, or ``refused``: an error status, or no whole response at all."""
    with side.connect() as connection:
        connection.send(request("GET", f"/{name}", [("Connection", "close")]))
        try:
            response = connection.read_response()
        except (AssertionError, OSError, ValueError):
            return {"refused": True}
    if response.status >= 500:
        return {"refused": True}
    return response_view(response.status, response.headers, response.body)


def websocket_outcome(side: Side, name: str) -> dict[str, Any]:
    """What a client sees: the handshake's answer, then the first message or the close."""
    try:
        with connect(websocket_url(side, f"/{name}"), open_timeout=15, close_timeout=5) as client:
            seen: dict[str, Any] = {"accepted": True, "x-a": client.response.headers.get("x-a")}
            if name.startswith("accept-"):
                return seen
            try:
                message = client.recv(timeout=15)
            except ConnectionClosed as closed:
                code = closed.rcvd.code if closed.rcvd else None
                # No close frame, or 1011: the server refused what the app sent.
                if code in (None, 1006, 1011):
                    return {"refused": True}
                return {**seen, "close": [code, closed.rcvd.reason]}
            return {**seen, "message": repr(message)}
    except InvalidStatus as denied:
        response = denied.response
        if response.status_code >= 500:
            return {"refused": True}
        return {"denied": response.status_code, "x-a": response.headers.get("x-a"), "body": bytes(response.body)}


@pytest.mark.parametrize("name", ACCEPTED_HTTP)
def test_http_shapes_every_reference_accepts(pair: Pair, name: str) -> None:
    rush_view, _ = pair.check(name, lambda side: http_outcome(side, name))
    assert "refused" not in rush_view, rush_view


@pytest.mark.parametrize("pair", ["hypercorn"], indirect=True)
@pytest.mark.parametrize("name", ODD_VIEWS)
def test_memoryviews_that_are_not_flat_bytes(pair: Pair, name: str) -> None:
    """A strided view, a view of two-byte items, a two-dimensional view: hypercorn sends their
    bytes, as rush does; uvicorn writes a chunk size of the item count (or nothing), so it is not
    the oracle here."""
    rush_view, _ = pair.check(name, lambda side: http_outcome(side, name))
    assert rush_view.get("body") in ("ok", "okok"), rush_view


@pytest.mark.parametrize("name", REFUSED_HTTP)
def test_http_shapes_every_reference_refuses(pair: Pair, name: str) -> None:
    pair.check(name, lambda side: http_outcome(side, name))


@pytest.mark.parametrize("pair", ["uvicorn-httptools", "uvicorn-h11"], indirect=True)
@pytest.mark.parametrize("name", TRAILERS)
def test_trailers_true_where_trailers_are_not_offered(pair: Pair, name: str) -> None:
    """Over HTTP/1.1 the scope offers no trailers: uvicorn ignores ``"trailers": True`` and ends the
    response with the body. hypercorn waits for trailers that cannot be sent (it never ends the
    response), so rush follows uvicorn. An ``http.response.trailers`` the app sends anyway raises
    under uvicorn after the response is complete; rush drops it without failing the app (it did so
    before the flag was ignored), which the client cannot tell apart."""
    rush_view, _ = pair.check(name, lambda side: http_outcome(side, name))
    assert rush_view["body"] == "ok", rush_view
    assert any("return" in event for event in pair.rush.wait_finished(f"/{name}")), pair.rush.events(f"/{name}")


@pytest.mark.parametrize("name", ACCEPTED_WS)
def test_websocket_shapes_every_reference_accepts(pair: Pair, name: str) -> None:
    rush_view, _ = pair.check(name, lambda side: websocket_outcome(side, name))
    assert "refused" not in rush_view, rush_view


@pytest.mark.parametrize("name", REFUSED_WS)
def test_websocket_shapes_every_reference_refuses(pair: Pair, name: str) -> None:
    pair.check(name, lambda side: websocket_outcome(side, name))


@pytest.mark.parametrize("pair", ["uvicorn-httptools"], indirect=True)
@pytest.mark.parametrize("name", DISPUTED_HTTP)
def test_http_shapes_the_references_disagree_on(pair: Pair, name: str) -> None:
    """Compared with uvicorn (httptools), uvicorn's default; deliberate.toml lists rush's choices."""
    pair.check(name, lambda side: http_outcome(side, name))


@pytest.mark.parametrize("pair", ["uvicorn-httptools"], indirect=True)
@pytest.mark.parametrize("name", DISPUTED_WS)
def test_websocket_shapes_the_references_disagree_on(pair: Pair, name: str) -> None:
    """As above, for WebSocket messages."""
    pair.check(name, lambda side: websocket_outcome(side, name))


def http2_outcome(side: Side, name: str) -> dict[str, Any]:
    """A GET over h2c (prior knowledge) that says ``TE: trailers``: the status, body and trailers,
    or how the stream ended otherwise (reset, or the connection closed)."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    seen: dict[str, Any] = {"body": b""}
    deadline = time.monotonic() + 15
    with socket.create_connection(("127.0.0.1", side.server.port), timeout=15) as sock:
        connection.initiate_connection()
        headers = [(":method", "GET"), (":scheme", "http"), (":authority", "127.0.0.1"), (":path", f"/{name}")]
        connection.send_headers(1, [*headers, ("te", "trailers")], end_stream=True)
        sock.sendall(connection.data_to_send())
        while "ended" not in seen:
            assert time.monotonic() < deadline, f"no end of stream within 15 s under {side.name}: {seen}"
            data = sock.recv(65536)
            if not data:
                seen["ended"] = "connection closed"
                break
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.InformationalResponseReceived):
                    seen.setdefault("hints", []).append(
                        [value.decode() for name, value in event.headers if name == b"link"]
                    )
                elif isinstance(event, h2.events.ResponseReceived):
                    fields = dict(event.headers)
                    seen["status"] = fields[b":status"].decode()
                    seen["x-a"] = fields.get(b"x-a", b"<none>").decode()
                elif isinstance(event, h2.events.DataReceived):
                    seen["body"] += event.data
                    connection.acknowledge_received_data(event.flow_controlled_length, 1)
                elif isinstance(event, h2.events.TrailersReceived):
                    seen["trailers"] = {name.decode(): value.decode() for name, value in event.headers}
                elif isinstance(event, h2.events.StreamEnded):
                    seen["ended"] = "end of stream"
                elif isinstance(event, h2.events.StreamReset):
                    seen["ended"] = "reset"
            sock.sendall(connection.data_to_send())
    if seen.get("status", "500") >= "500" or seen["ended"] != "end of stream":
        # An error answer, or a stream that did not end normally.
        return {"refused": True}
    fields = ("status", "x-a", "hints", "trailers")
    return {"body": seen["body"].decode(), **{field: seen.get(field, "<none>") for field in fields}}


@pytest.mark.parametrize("pair", ["hypercorn"], indirect=True)
@pytest.mark.parametrize("name", HTTP2_TRAILERS)
def test_trailers_over_http2(pair: Pair, name: str) -> None:
    """Over HTTP/2 the scope offers trailers: hypercorn, the one reference that sends them, takes
    their fields written as lists or bytes-like items, as rush does (a trailer of three items is
    refused by both)."""
    rush_view, _ = pair.check(f"{name}-h2", lambda side: http2_outcome(side, name))
    if name == "trailer-three-items":
        assert rush_view == {"refused": True} or rush_view["trailers"] == "<none>", rush_view
    else:
        assert rush_view["trailers"] != "<none>", rush_view


@pytest.mark.parametrize("pair", ["hypercorn"], indirect=True)
@pytest.mark.parametrize("name", HTTP2_HINTS)
def test_early_hints_over_http2(pair: Pair, name: str) -> None:
    """hypercorn offers Early Hints over HTTP/2 only: its links as bytes-like values, as rush
    takes them. A link or a header value with spaces around it loses them (RFC 9113 8.2.1 forbids
    them in HTTP/2, and the client drops the response), as under hypercorn; a str link is refused
    by both."""
    pair.check(f"{name}-h2", lambda side: http2_outcome(side, name))
