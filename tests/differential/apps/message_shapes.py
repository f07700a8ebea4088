"""A raw ASGI app that sends one message shape per path (tests/differential/test_diff_message_shapes.py).

``/NAME`` sends the HTTP messages of ``HTTP[NAME]``; a WebSocket to ``/NAME`` sends those of
``WS[NAME]`` (after ``websocket.connect``), then waits for the client to leave. Each case is a
field written another way than the usual tuple of ``bytes``: as the ASGI spec writes it (headers
as two-item lists), as frameworks pass it on (a ``memoryview`` body), or wrong. ``app_h11`` and
``app_hypercorn`` are the same app under other names, so each reference gets files of its own.
"""

from __future__ import annotations

import array
from collections.abc import Callable
from typing import Any

TYPE = (b"content-type", b"text/plain")


def start(headers: Any, **extra: Any) -> dict[str, Any]:
    return {"type": "http.response.start", "status": 200, "headers": headers, **extra}


def body(data: Any = b"ok", **extra: Any) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, **extra}


def hint(*links: Any) -> dict[str, Any]:
    return {"type": "http.response.early_hint", "links": list(links)}


def status(value: Any) -> dict[str, Any]:
    return {"type": "http.response.start", "status": value, "headers": [TYPE]}


# Built per request: a generator or iterator in a message is used up by one send.
HTTP: dict[str, Callable[[], list[dict[str, Any]]]] = {
    # Accepted by uvicorn (h11 and httptools) and hypercorn alike.
    "headers-as-lists": lambda: [start([list(TYPE), [b"x-a", b"1"]]), body()],
    "headers-tuple-of-tuples": lambda: [start((TYPE, (b"x-a", b"1"))), body()],
    "headers-mixed": lambda: [start([TYPE, [b"x-a", b"1"]]), body()],
    "headers-generator": lambda: [start(pair for pair in [TYPE, (b"x-a", b"1")]), body()],
    "header-pair-iterator": lambda: [start([iter(TYPE)]), body()],
    "header-bytearray": lambda: [start([(bytearray(b"x-a"), bytearray(b"1"))]), body()],
    "header-memoryview-value": lambda: [start([(b"x-a", memoryview(b"1"))]), body()],
    "length-bytearray": lambda: [start([TYPE, (b"content-length", bytearray(b"2"))]), body()],
    "body-bytearray": lambda: [start([TYPE]), body(bytearray(b"ok"))],
    "body-memoryview": lambda: [start([TYPE]), body(memoryview(b"ok"))],
    "body-memoryview-slice": lambda: [start([TYPE]), body(memoryview(b"xoky")[1:3])],
    "body-key-missing": lambda: [start([TYPE]), {"type": "http.response.body"}],
    "more-body-ints": lambda: [start([TYPE]), body(b"o", more_body=1), body(b"k", more_body=0)],
    "more-body-none": lambda: [start([TYPE]), body(b"ok", more_body=None)],
    "trailers-false": lambda: [start([TYPE], trailers=False), body()],
    "unknown-keys": lambda: [start([TYPE], extra_thing=1), body(b"ok", other=2)],
    # Refused by all three (an error, or a connection closed without a whole response).
    "header-three-items": lambda: [start([(b"x-a", b"1", b"2")]), body()],
    "header-one-item": lambda: [start([(b"x-a",)]), body()],
    "headers-none": lambda: [start(None), body()],
    "header-value-crlf": lambda: [start([(b"x-a", b"1\r\nx-b: 2")]), body()],
    "header-name-space": lambda: [start([(b"x a", b"1")]), body()],
    "status-missing": lambda: [{"type": "http.response.start", "headers": [TYPE]}, body()],
    "status-99": lambda: [status(99), body()],
    "status-true": lambda: [status(True), body()],
    "body-str": lambda: [start([TYPE]), body("ok")],
    "unknown-type": lambda: [start([TYPE]), {"type": "http.response.nonsense"}, body()],
    # The references disagree: compared with uvicorn (httptools) only.
    "header-memoryview-name": lambda: [start([(memoryview(b"x-a"), b"1")]), body()],
    "header-str-name": lambda: [start([("x-a", b"1")]), body()],
    "header-empty-name": lambda: [start([(b"", b"1")]), body()],
    "status-float": lambda: [status(200.0), body()],
    "status-600": lambda: [status(600), body()],
    "body-none": lambda: [start([TYPE]), body(None)],
    "body-list": lambda: [start([TYPE]), body([111, 107])],
    # Views that are not one flat run of bytes: hypercorn sends their bytes; uvicorn frames them
    # by their item count (or fails), which breaks the response.
    "body-memoryview-strided": lambda: [start([TYPE]), body(memoryview(b"xoxkx")[1::2])],
    "body-memoryview-wide-items": lambda: [start([TYPE]), body(memoryview(array.array("B", b"ok")).cast("H"))],
    "body-memoryview-2d": lambda: [start([TYPE]), body(memoryview(b"okok").cast("B", (2, 2)))],
    # Early hints over HTTP/2 (hypercorn offers them there only).
    "hints-bytes-like": lambda: [
        hint(bytearray(b"</a.css>; rel=preload; as=style"), memoryview(b"</b.js>; rel=preload; as=script")),
        start([TYPE]),
        body(),
    ],
    "hints-padded": lambda: [hint(b"  </a.css>; rel=preload  "), start([TYPE]), body()],
    "header-value-padded": lambda: [start([TYPE, (b"x-a", b"  1  ")]), body()],
    "hints-str": lambda: [hint("</a.css>; rel=preload"), start([TYPE]), body()],
    # Over HTTP/2, where trailers are offered (hypercorn alone of the references sends them).
    "trailers-as-lists": lambda: [
        start([TYPE], trailers=True),
        body(),
        {"type": "http.response.trailers", "headers": [[b"x-checksum", b"1"], [b"x-more", b"2"]]},
    ],
    "trailers-bytes-like": lambda: [
        start([TYPE], trailers=True),
        body(memoryview(b"ok")),
        {"type": "http.response.trailers", "headers": [(bytearray(b"x-checksum"), memoryview(b"1"))]},
    ],
    "trailers-in-two-messages": lambda: [
        start([TYPE], trailers=True),
        body(),
        {"type": "http.response.trailers", "headers": [(b"x-checksum", b"1")], "more_trailers": True},
        {"type": "http.response.trailers", "headers": [(b"x-more", b"2")]},
    ],
    "trailer-three-items": lambda: [
        start([TYPE], trailers=True),
        body(),
        {"type": "http.response.trailers", "headers": [(b"x-checksum", b"1", b"2")]},
    ],
    # Not offered over HTTP/1.1: uvicorn ignores the key (hypercorn waits for trailers).
    "trailers-not-offered": lambda: [start([TYPE], trailers=True), body()],
    "trailers-not-offered-then-sent": lambda: [
        start([TYPE], trailers=True),
        body(),
        {"type": "http.response.trailers", "headers": [(b"x-checksum", b"1")]},
    ],
}

ACCEPT = {"type": "websocket.accept"}

WS: dict[str, list[dict[str, Any]]] = {
    "accept-headers-as-lists": [{"type": "websocket.accept", "headers": [[b"x-a", b"1"]]}],
    "accept-header-bytearray": [{"type": "websocket.accept", "headers": [(bytearray(b"x-a"), bytearray(b"1"))]}],
    "accept-subprotocol-none": [{"type": "websocket.accept", "subprotocol": None}],
    "send-bytearray": [ACCEPT, {"type": "websocket.send", "bytes": bytearray(b"ok")}],
    "send-memoryview": [ACCEPT, {"type": "websocket.send", "bytes": memoryview(b"ok")}],
    "send-bytes-and-text": [ACCEPT, {"type": "websocket.send", "bytes": b"b", "text": "t"}],
    "send-text-none": [ACCEPT, {"type": "websocket.send", "bytes": b"b", "text": None}],
    "send-bytes-none": [ACCEPT, {"type": "websocket.send", "bytes": None, "text": "t"}],
    "close-reason-none": [ACCEPT, {"type": "websocket.close", "code": 1000, "reason": None}],
    "close-code-and-reason": [ACCEPT, {"type": "websocket.close", "code": 4000, "reason": "bye"}],
    "close-reason-bytes": [ACCEPT, {"type": "websocket.close", "code": 4000, "reason": b"bye"}],
    # The references disagree: compared with uvicorn (httptools) only.
    "accept-header-memoryview": [{"type": "websocket.accept", "headers": [(memoryview(b"x-a"), memoryview(b"1"))]}],
    "close-code-none": [ACCEPT, {"type": "websocket.close", "code": None}],
    "close-code-str": [ACCEPT, {"type": "websocket.close", "code": "4000"}],
    "close-reason-too-long": [ACCEPT, {"type": "websocket.close", "code": 4000, "reason": "x" * 124}],
    "deny-without-headers": [
        {"type": "websocket.http.response.start", "status": 403},
        {"type": "websocket.http.response.body", "body": b"no"},
    ],
    "deny-headers-as-lists": [
        {"type": "websocket.http.response.start", "status": 403, "headers": [[b"x-a", b"1"]]},
        {"type": "websocket.http.response.body", "body": b"no"},
    ],
    "deny-body-bytearray": [
        {"type": "websocket.http.response.start", "status": 403, "headers": []},
        {"type": "websocket.http.response.body", "body": bytearray(b"no")},
    ],
    "deny-body-memoryview": [
        {"type": "websocket.http.response.start", "status": 403, "headers": []},
        {"type": "websocket.http.response.body", "body": memoryview(b"no")},
    ],
}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    name = scope["path"].strip("/")
    if scope["type"] == "websocket":
        await receive()
        for message in WS[name]:
            await send(message)
        if WS[name][-1]["type"] in ("websocket.accept", "websocket.send"):
            await receive()
        return
    for message in HTTP[name]():
        await send(message)


app_h11 = app
app_hypercorn = app
