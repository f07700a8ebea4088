"""WebSocket over HTTP/2 (RFC 8441) against hypercorn, which serves it too: the
FastAPI chat of FastAPI's docs (tests/differential/apps/fastapi_chat.py) under both,
driven by the same extended CONNECT client (tests/h2_ws_client.py, the ``h2``
package and ``wsproto``): the status, subprotocol, messages and close each client
got, and the scope each app was called with."""

from __future__ import annotations

import pytest
from h2_ws_client import H2WebSocket
from harness import Pair, Side, start_pair
from support import ServerFactory, wait_for
from wsproto.events import CloseConnection

# The scope's keys that the request decides (the rest describes the server).
SCOPE_KEYS = ("type", "http_version", "scheme", "path", "raw_path", "query_string", "subprotocols")


@pytest.fixture(scope="module")
def chat(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "fastapi_chat", "asgi", reference="hypercorn")


def scope_of(side: Side, tag: str) -> dict:
    events = wait_for(lambda: side.events(tag), f"{side.name}'s app to record {tag}")
    scope = events[0]["scope"]
    view = {key: scope.get(key) for key in SCOPE_KEYS}
    # Host is the port each server listens on; the rest are the client's fields.
    view["headers"] = sorted(tuple(pair) for pair in scope["headers"] if pair[0] != "host")
    return view


def test_what_the_app_saw_and_the_client_got(chat: Pair) -> None:
    def script(side: Side) -> dict:
        views: dict = {}
        port = side.server.port
        with H2WebSocket(port) as client:
            fields = (("sec-websocket-version", "13"), ("sec-websocket-protocol", "echo"), ("x-diff-id", "bytes"))
            views["bytes status"] = client.open("/bytes?x=1", fields)
            views["subprotocol"] = client.headers.get("sec-websocket-protocol")
            client.send_message(b"abc")
            views["reversed"] = client.receive().data
            close = client.receive()
            assert isinstance(close, CloseConnection)
            views["close"] = [close.code, close.reason]
            client.send(close.response())
            client.wait(lambda: client.ended, "the stream's end")
        with H2WebSocket(port) as client:
            views["chat status"] = client.open("/ws/7", (("sec-websocket-version", "13"), ("x-diff-id", "chat")))
            client.send_message("hi")
            views["chat"] = [client.receive().data, client.receive().data]
            views["chat close"] = client.close_handshake(1000).code
        with H2WebSocket(port) as client:
            views["private status"] = client.open("/private", (("sec-websocket-version", "13"), ("x-diff-id", "p")))
        views["scopes"] = {tag: scope_of(side, tag) for tag in ("bytes", "chat")}
        return views

    ours, theirs = chat.run(script)
    assert ours == theirs
    assert ours["bytes status"] == 200 and ours["reversed"] == b"cba" and ours["close"] == [4000, "done"]
    assert ours["scopes"]["bytes"]["http_version"] == "2"
