"""Differential tests of the FastAPI corpus apps (apps/fastapi_app.py, apps/fastapi_chat.py)
under rush and uvicorn, driven by httpx, curl, websockets and raw sockets."""

from __future__ import annotations

import hashlib
import json
import socket
import struct
from pathlib import Path

import httpx
import pytest
from harness import (
    Pair,
    Side,
    asgi_app_view,
    curl_view,
    httpx_view,
    read_until,
    start_pair,
    websocket_url,
)
from support import ServerFactory, parse_responses, request
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect


@pytest.fixture(scope="module")
def api(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "fastapi_app", "asgi")


@pytest.fixture(scope="module")
def chat(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "fastapi_chat", "asgi")


def test_path_and_query_parameters(api: Pair) -> None:
    def script(side: Side) -> list[dict]:
        with httpx.Client(base_url=side.url) as client:
            targets = ["/items/5?q=somequery", "/items/5?short=1", "/items/foo", "/items/%35?q=caf%C3%A9", "/nowhere"]
            views = [httpx_view(client.get(target)) for target in targets]
            views += [httpx_view(client.head(target)) for target in ("/items/5", "/video?size=131072")]
            return views

    api.check("parameters", script)


def test_pydantic_body(api: Pair) -> None:
    def script(side: Side) -> list[dict]:
        with httpx.Client(base_url=side.url) as client:
            good = client.post("/items/", json={"name": "Foo", "price": 35.4, "tax": 3.2, "tags": ["a"]})
            invalid = client.post("/items/", json={"name": "Foo"})
            not_json = client.post("/items/", content=b"{", headers={"content-type": "application/json"})
            return [httpx_view(good), httpx_view(invalid), httpx_view(not_json)]

    api.check("pydantic", script)


def test_upload_file_with_curl(api: Pair, tmp_path: Path) -> None:
    upload = tmp_path / "report.csv"
    upload.write_bytes(b"a,b\n" + bytes(range(256)) * 4000)

    def script(side: Side) -> dict:
        view = curl_view(side, "/uploadfile/", "-F", f"file=@{upload};type=text/csv", "-H", "x-diff-id: upload")
        app_seen = asgi_app_view(side.wait_finished("upload"))
        # The multipart boundary is curl's random choice: compare the body's length and digest.
        content_type = dict(app_seen["scope"]["headers"])["content-type"]
        boundary = content_type.partition("boundary=")[2].encode()
        body = app_seen["received"][0]["body"].encode("latin-1").replace(boundary, b"BOUNDARY")
        app_seen["received"][0]["body"] = (len(body), hashlib.sha256(body).hexdigest())
        app_seen["scope"]["headers"] = [h for h in app_seen["scope"]["headers"] if h[0] != "content-type"]
        return {"client": view, "app": app_seen}

    rush_view, _ = api.check("upload", script)
    assert json.loads(rush_view["client"]["body"])["size"] == upload.stat().st_size


def test_a_20mb_upload_file_with_default_flags(api: Pair) -> None:
    """Issue 33 item 1: a 20 MB ``UploadFile`` was a 413 under rush's old
    16 MiB default while uvicorn took it; neither has a body limit now. The
    payload repeats, so the recorder's copy of what the app received stays
    plain text."""
    payload = b"rush" * (5 * 1000**2)

    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url, timeout=60) as client:
            files = {"file": ("big.bin", payload, "application/octet-stream")}
            return httpx_view(client.post("/uploadfile/", files=files, headers={"x-diff-id": "upload-20mb"}))

    rush_view, _ = api.check("upload-20mb", script)
    assert rush_view["status"] == 200
    assert json.loads(rush_view["body"])["size"] == len(payload)


def test_background_task_runs_after_the_response(api: Pair) -> None:
    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url) as client:
            response = client.post("/send-notification/someone@example.com", headers={"x-diff-id": "notify"})
            side.wait_finished("notify")
            return {"response": httpx_view(response), "after": client.get("/notifications").json()}

    api.check("background", script)


def test_response_arrives_before_a_waiting_background_task_ends(api: Pair) -> None:
    """The background task waits until the client itself says so (after it got the response): a
    server that held the response until the app's call ended would leave the client waiting."""

    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url, timeout=15) as client:
            response = client.post("/send-email/ann@example.com", headers={"x-diff-id": "email"})
            client.post("/mail-server-ready")
            side.wait_finished("email")
            return {"response": httpx_view(response), "after": client.get("/notifications").json()}

    api.check("email", script)


def test_streaming_response_to_a_slow_reader(api: Pair) -> None:
    """A reader with a small receive window that takes the stream in small bites: every byte arrives."""
    size = 4 << 20

    def script(side: Side) -> dict:
        with side.connect(rcvbuf=4096) as connection:
            connection.send(request("GET", f"/video?size={size}", [("Connection", "close")]))
            received = bytearray()
            while chunk := connection.sock.recv(1024):
                received += chunk
        (response,), _ = parse_responses(bytes(received))
        return {
            "status": response.status,
            "size": len(response.body),
            "sha256": hashlib.sha256(response.body).hexdigest(),
        }

    api.check("slow-reader", script)


def sse_until(side: Side, target: str, tag: str, last: bytes) -> dict:
    connection = side.connect()
    connection.send(request("GET", target, [("x-diff-id", tag)]))
    data = read_until(connection, last)
    connection.close()
    return {"events_seen": data.count(b"data: ") >= 5, "app": asgi_app_view(side.wait_finished(tag))}


def test_sse_stops_when_the_client_leaves(api: Pair) -> None:
    api.check("sse", lambda side: sse_until(side, "/events", "sse", b"data: 4\n\n"))


def test_is_disconnected_in_finally_keeps_the_last_chunk(api: Pair) -> None:
    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url) as client:
            return httpx_view(client.get("/countdown"))

    api.check("countdown", script)


def test_websocket_chat(chat: Pair) -> None:
    def script(side: Side) -> dict:
        with (
            connect(websocket_url(side, "/ws/1"), additional_headers={"x-diff-id": "chat-1"}) as first,
            connect(websocket_url(side, "/ws/2"), additional_headers={"x-diff-id": "chat-2"}) as second,
        ):
            first.send("hello")
            seen_first = [first.recv(timeout=15), first.recv(timeout=15)]
            seen_second = [second.recv(timeout=15)]
            second.close()
            seen_first.append(first.recv(timeout=15))
        return {
            "first": seen_first,
            "second": seen_second,
            "app_first": asgi_app_view(side.wait_finished("chat-1")),
            "app_second": asgi_app_view(side.wait_finished("chat-2")),
        }

    chat.check("chat", script)


def test_websocket_subprotocol_bytes_and_close_code(chat: Pair) -> None:
    def script(side: Side) -> dict:
        with connect(
            websocket_url(side, "/bytes"), subprotocols=["echo"], additional_headers={"x-diff-id": "bytes"}
        ) as ws:
            ws.send(b"\x00\x01abc")
            reply = ws.recv(timeout=15)
            try:
                ws.recv(timeout=15)
            except ConnectionClosed as closed:
                ending = type(closed).__name__
        return {
            "subprotocol": ws.subprotocol,
            "reply": reply.hex(),
            "ending": ending,
            "close": [ws.close_code, ws.close_reason],
            "app": asgi_app_view(side.wait_finished("bytes")),
        }

    chat.check("bytes", script)


def test_websocket_dropped_without_a_close_frame(chat: Pair) -> None:
    """A client whose connection dies (a RST, no close frame): the app's receive() gets
    websocket.disconnect with 1006, and the chat tells the others."""

    def script(side: Side) -> dict:
        with connect(websocket_url(side, "/ws/7"), additional_headers={"x-diff-id": "listener"}) as listener:
            with connect(websocket_url(side, "/ws/8"), additional_headers={"x-diff-id": "dropped"}) as dropped:
                dropped.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                dropped.socket.close()
                farewell = listener.recv(timeout=15)
        return {"farewell": farewell, "app": asgi_app_view(side.wait_finished("dropped"))}

    chat.check("dropped", script)


def test_websocket_refused_before_accept(chat: Pair) -> None:
    def script(side: Side) -> dict:
        try:
            with connect(websocket_url(side, "/private"), additional_headers={"x-diff-id": "refused"}):
                refused = None
        except InvalidStatus as error:
            refused = {"status": error.response.status_code, "body": error.response.body.decode("latin-1")}
        with connect(websocket_url(side, "/private?token=let-me-in")) as ws:
            welcome = ws.recv(timeout=15)
        return {"refused": refused, "welcome": welcome, "app": asgi_app_view(side.wait_finished("refused"))}

    chat.check("refused", script)
