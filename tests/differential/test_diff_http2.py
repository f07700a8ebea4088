"""Differential tests of real apps over HTTP/2 (h2c, prior knowledge): rush against hypercorn.

uvicorn and gunicorn, the references of the rest of this suite, have no HTTP/2; hypercorn
serves ASGI and WSGI apps over h2c by prior knowledge (`--bind fd://N`), so it is the oracle
here. The same corpus apps (FastAPI, Flask) run under both, wrapped in the recorder, and
httpx (`http1=False, http2=True`) or the `h2` library drive them the same way: what the app
saw (the scope or environ, every `receive()`) and what the client got are compared, with the
usual masking and tests/differential/deliberate.toml.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
from h2.errors import ErrorCodes
from harness import Pair, Side, asgi_app_view, httpx_view, start_pair, wsgi_app_view
from support import GUARD_TIMEOUT, ServerFactory

H2 = {"http1": False, "http2": True}
# What an HTTP/2 scope carries that both servers fill alike; the rest (server, client port,
# extensions each server offers) is masked or server-owned.
# The environ keys the request decides; the rest describe the server (hypercorn runs WSGI apps
# on threads, has no REMOTE_PORT or wsgi.file_wrapper).
REQUEST_KEYS = re.compile(
    r"^(HTTP_|CONTENT_|REQUEST_METHOD$|SCRIPT_NAME$|PATH_INFO$|QUERY_STRING$|SERVER_PROTOCOL$|wsgi\.url_scheme$)"
)
SCOPE_KEYS = ("type", "http_version", "method", "scheme", "path", "raw_path", "query_string", "root_path", "headers")


@pytest.fixture(scope="module")
def api(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "fastapi_app", "asgi", reference="hypercorn")


@pytest.fixture(scope="module")
def flask(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "flask_app", "wsgi", reference="hypercorn")


def test_requests_and_what_the_app_saw(api: Pair) -> None:
    """Parameters, a HEAD, a 404 and a 422, each with the scope the app got over h2."""

    def script(side: Side) -> list[dict]:
        with httpx.Client(base_url=side.url, **H2) as client:
            views = []
            for index, target in enumerate(["/items/5?q=caf%C3%A9", "/items/foo", "/nowhere"]):
                response = client.get(target, headers={"x-diff-id": f"get-{index}", "accept": "text/plain"})
                assert response.http_version == "HTTP/2"
                views.append({"response": httpx_view(response), "app": seen(side, f"get-{index}")})
            head = client.head("/items/5", headers={"x-diff-id": "head"})
            views.append({"response": httpx_view(head), "app": seen(side, "head")})
            return views

    api.check("h2-requests", script)


def test_json_body_and_a_large_upload(api: Pair) -> None:
    """A JSON body, and a 1 MiB multipart upload: larger than the initial 64 KiB flow-control
    window, so both servers must grant more credit as the app reads."""
    document = bytes(range(256)) * 4096

    def script(side: Side) -> list[dict]:
        with httpx.Client(base_url=side.url, **H2) as client:
            good = client.post("/items/", json={"name": "Foo", "price": 35.4, "tags": ["a"]})
            invalid = client.post("/items/", json={"name": "Foo"})
            upload = client.post("/uploadfile/", files={"file": ("doc.bin", document, "application/octet-stream")})
            return [httpx_view(good), httpx_view(invalid), httpx_view(upload)]

    rush_view, _ = api.check("h2-bodies", script)
    assert json.loads(rush_view[2]["body"])["sha256"] == hashlib.sha256(document).hexdigest()


def test_a_large_streamed_response(api: Pair) -> None:
    """A 4 MiB StreamingResponse over one stream: every byte, in order, within the window rules."""
    size = 4 << 20

    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url, **H2) as client:
            response = client.get(f"/video?size={size}")
            return {
                "status": response.status_code,
                "size": len(response.content),
                "sha256": hashlib.sha256(response.content).hexdigest(),
            }

    api.check("h2-stream", script)


def test_many_streams_on_one_connection(api: Pair) -> None:
    """Thirty requests at once on one connection, each answered on its own stream with its
    own values (a mix-up between streams would show as a wrong item or query)."""

    async def together(side: Side) -> list[dict]:
        async with httpx.AsyncClient(base_url=side.url, **H2) as client:
            responses = await asyncio.gather(*(client.get(f"/items/{n}?q=stream-{n}") for n in range(30)))
        assert {response.http_version for response in responses} == {"HTTP/2"}
        return [httpx_view(response) for response in responses]

    api.check("h2-streams", lambda side: asyncio.run(together(side)))


def test_a_stream_the_client_resets_ends_the_app(api: Pair) -> None:
    """An SSE stream (`request.is_disconnected()` between events) that the client resets
    (RST_STREAM, CANCEL) after five events, keeping the connection: the app must learn of it
    (`http.disconnect`) and end, as under hypercorn, and a second request on the same
    connection is still answered. (httpx does not reset a stream it stops reading, so the
    `h2` library drives this one.)"""

    def script(side: Side) -> dict:
        with H2Client(side.address) as client:
            stream = client.request("/events")
            client.read_until(stream, b"data: 4\n\n")
            client.connection.reset_stream(stream, ErrorCodes.CANCEL)
            client.flush()
            app_view = asgi_app_view(side.wait_finished("/events"), scope_keys=SCOPE_KEYS)
            after = client.request("/items/7")
            status, body = client.read_until(after, None)
            return {"app": app_view, "after": {"status": status, "body": body.decode()}}

    api.check("h2-reset", script)


def test_flask_session_and_environ(flask: Pair) -> None:
    """A Flask session kept across requests on one h2 connection, and the environ of one of
    them (SERVER_PROTOCOL, HTTP_HOST from `:authority`, the headers)."""

    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url, **H2) as client:
            visits = [httpx_view(client.get("/visits")) for _ in range(3)]
            client.get("/visits", headers={"x-diff-id": "h2-environ"})
        # The session cookie (in Set-Cookie, and in the environ's HTTP_COOKIE) is signed with the
        # second it was made in: the harness masks its timestamp and signature, not its payload.
        return {"visits": visits, "app": closed_wsgi_view(side, "h2-environ")}

    flask.check("h2-session", script)


def test_flask_streamed_body_and_close(flask: Pair) -> None:
    """`stream_with_context` over a stream: the chunks, and the body's `close()` called."""

    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url, **H2) as client:
            response = client.get("/stream?name=World", headers={"x-diff-id": "h2-stream"})
        return {"client": httpx_view(response), "app": closed_wsgi_view(side, "h2-stream")}

    flask.check("h2-flask-stream", script)


class H2Client:
    """A minimal HTTP/2 client over a blocking socket (the `h2` library's state machine), for
    what httpx will not do: reset one stream and go on using the connection."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=GUARD_TIMEOUT)
        self.connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.connection.initiate_connection()
        self.flush()
        self.statuses: dict[int, int] = {}
        self.bodies: dict[int, bytes] = {}
        self.ended: set[int] = set()

    def __enter__(self) -> H2Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.sock.close()

    def flush(self) -> None:
        self.sock.sendall(self.connection.data_to_send())

    def request(self, path: str) -> int:
        stream = self.connection.get_next_available_stream_id()
        headers = [(":method", "GET"), (":scheme", "http"), (":authority", "127.0.0.1"), (":path", path)]
        self.connection.send_headers(stream, headers, end_stream=True)
        self.flush()
        return stream

    def read_until(self, stream: int, marker: bytes | None) -> tuple[int, bytes]:
        """Reads until the stream's body holds ``marker`` (or, with None, until it ends)."""
        while not (marker in self.bodies.get(stream, b"") if marker else stream in self.ended):
            data = self.sock.recv(65536)
            assert data, "the server closed the connection"
            for event in self.connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    self.statuses[event.stream_id] = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    self.bodies[event.stream_id] = self.bodies.get(event.stream_id, b"") + event.data
                    self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    self.ended.add(event.stream_id)
            self.flush()
        return self.statuses[stream], self.bodies.get(stream, b"")


def test_is_disconnected_after_a_whole_stream(api: Pair) -> None:
    """`request.is_disconnected()` in a streaming body's `finally`, after the last chunk: the
    client is still there, so nothing is cut and every event arrives."""

    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url, **H2) as client:
            return httpx_view(client.get("/countdown"))

    api.check("h2-countdown", script)


def closed_wsgi_view(side: Side, tag: str) -> dict:
    """What a WSGI app saw of the request tagged ``tag``, once its body was closed: the environ
    limited to the keys the request decides."""
    events = side.wait_events(tag, lambda events: any("close" in e for e in events), "close()")
    view = wsgi_app_view(events)
    view["environ"] = {key: value for key, value in view["environ"].items() if REQUEST_KEYS.match(key)}
    return view


def seen(side: Side, tag: str) -> dict:
    """What the app saw of the request tagged ``tag``, limited to the keys both servers fill."""
    return asgi_app_view(side.wait_finished(tag), scope_keys=SCOPE_KEYS)
