"""Differential tests of the Quart and Litestar corpus apps (apps/quart_app.py,
apps/litestar_app.py) under rush and uvicorn."""

from __future__ import annotations

import httpx
import pytest
from harness import Pair, Side, asgi_app_view, curl_view, httpx_view, start_pair, websocket_url
from support import ServerFactory, chunked, request
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect


@pytest.fixture(scope="module")
def quart(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "quart_app", "asgi")


@pytest.fixture(scope="module")
def litestar(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "litestar_app", "asgi")


def test_quart_routes(quart: Pair) -> None:
    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url) as client:
            return {
                "hello": httpx_view(client.get("/")),
                "echo": httpx_view(client.post("/echo", json={"a": [1, 2]})),
                "stream": httpx_view(client.get("/stream")),
                "missing": httpx_view(client.get("/missing")),
                "head": curl_view(side, "/", "-I"),
            }

    quart.check("routes", script)


def test_quart_request_body_streaming(quart: Pair) -> None:
    def script(side: Side) -> dict:
        with side.connect() as connection:
            head = request("POST", "/count", [("x-diff-id", "count"), ("Transfer-Encoding", "chunked")])
            connection.send(head + chunked(b"a" * 70000, b"b" * 30000, b"c"))
            response = connection.read_response()
        return {"client": (response.status, response.body), "app": asgi_app_view(side.wait_finished("count"))}

    quart.check("count", script)


def test_quart_websocket(quart: Pair) -> None:
    def script(side: Side) -> dict:
        with connect(websocket_url(side, "/ws"), additional_headers={"x-diff-id": "quart-ws"}) as ws:
            ws.send("one")
            replies = [ws.recv(timeout=15)]
            ws.send("bye")
            try:
                ws.recv(timeout=15)
            except ConnectionClosed as closed:
                replies.append(type(closed).__name__)
            close = [ws.close_code, ws.close_reason]
        return {"replies": replies, "close": close, "app": asgi_app_view(side.wait_finished("quart-ws"))}

    quart.check("websocket", script)


def test_litestar_routes(litestar: Pair) -> None:
    def script(side: Side) -> dict:
        with httpx.Client(base_url=side.url) as client:
            return {
                "get": httpx_view(client.get("/todos/0?verbose=true")),
                "bad-param": httpx_view(client.get("/todos/zero")),
                "post": httpx_view(client.post("/todos", json={"title": "Write tests"})),
                "bad-body": httpx_view(client.post("/todos", json={"done": True})),
                "stream": httpx_view(client.get("/numbers")),
                "method": httpx_view(client.delete("/numbers")),
            }

    litestar.check("routes", script)


def test_litestar_websocket_listener(litestar: Pair) -> None:
    def script(side: Side) -> dict:
        with connect(websocket_url(side, "/shout"), additional_headers={"x-diff-id": "shout"}) as ws:
            ws.send("quiet words")
            reply = ws.recv(timeout=15)
        return {"reply": reply, "app": asgi_app_view(side.wait_finished("shout"))}

    litestar.check("shout", script)
