"""Apps for tests/test_http3.py, one per interface (``rush tests.apps.h3_apps:<name> --http3``):

* ``app`` (rush App), ``wsgi`` and ``asgi`` (raw ASGI 3) each answer

  - ``/hello``: ``hello``;
  - ``/info``: JSON with the protocol the app was told (``Request.http_version``,
    ``SERVER_PROTOCOL``, ``http_version``), the scheme, the ``host`` and the header names;
  - ``/echo`` (POST): JSON with the body's length and SHA-256;

* ``asgi`` also:

  - ``/receive``: reads its body through ``receive()``; JSON with length, SHA-256 and how many
    ``http.request`` messages it came in;
  - ``/stream-echo``: starts its response, then answers every ``http.request`` message with
    ``<length>\\n`` as it comes, and ``end\\n`` after the last: a client sees whether the app
    had a piece before the client sent the next one;
  - ``/trailers``: a body, then ``x-checksum`` (its SHA-256) in ``http.response.trailers``;
  - ``/download?parts=N``: N parts of 16 KiB (part i is byte ``i % 251`` repeated), each its own
    ``more_body`` message;
  - ``/held?id=X``: starts its response (``started``), then reads its body; answers
    ``received <length>`` if the body ends, notes X if ``http.disconnect`` comes first;
  - ``/seen?id=X``: ``yes`` if ``/held?id=X`` was told ``http.disconnect``;
  - ``/log``: JSON list of every request the app was called with: ``[path, x-case]``;
  - ``/pid``: the worker's process id.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from rush import App, Request

app = App()


@app.get("/hello")
def hello(request: Request) -> str:
    return "hello"


@app.get("/info")
def info(request: Request) -> dict[str, Any]:
    return {
        "http_version": request.http_version,
        "scheme": request.scheme,
        "host": request.headers.get("host"),
        "headers": sorted({name.lower() for name, _ in request.headers.multi_items()}),
    }


@app.post("/echo")
def echo(request: Request) -> dict[str, Any]:
    body = request.body
    return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/hello":
        body = b"hello"
    elif path == "/info":
        found = {
            "http_version": environ["SERVER_PROTOCOL"],
            "scheme": environ["wsgi.url_scheme"],
            "host": environ.get("HTTP_HOST"),
            "headers": sorted(key[5:].lower().replace("_", "-") for key in environ if key.startswith("HTTP_")),
        }
        body = json.dumps(found).encode()
    elif path == "/echo":
        data = environ["wsgi.input"].read()
        body = json.dumps({"length": len(data), "sha256": hashlib.sha256(data).hexdigest()}).encode()
    else:
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


# Every request the ASGI app was called with, as [path, x-case] (for the malformed-request tests).
calls: list[list[str | None]] = []
# /held requests that were told http.disconnect, by id.
disconnected: set[str] = set()


async def _read_body(receive: Callable[[], Any]) -> tuple[bytes, int]:
    chunks = []
    messages = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise RuntimeError(f"unexpected {message['type']}")
        messages += 1
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), messages


async def _respond(send: Callable[[dict[str, Any]], Any], body: bytes, status: int = 200) -> None:
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


async def _start(send: Callable[[dict[str, Any]], Any], first: bytes, trailers: bool = False) -> None:
    headers = [(b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers, "trailers": trailers})
    await send({"type": "http.response.body", "body": first, "more_body": True})


async def asgi(scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[dict[str, Any]], Any]) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    query = {key: values[0] for key, values in parse_qs(scope["query_string"].decode()).items()}
    headers = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in scope["headers"]]
    calls.append([path, next((value for name, value in headers if name == "x-case"), None)])
    if path == "/hello":
        await _respond(send, b"hello")
    elif path == "/info":
        found = {
            "http_version": scope["http_version"],
            "scheme": scope["scheme"],
            "host": next((value for name, value in headers if name == "host"), None),
            "headers": sorted({name for name, _ in headers}),
        }
        await _respond(send, json.dumps(found).encode())
    elif path in ("/echo", "/receive"):
        body, messages = await _read_body(receive)
        found = {"length": len(body), "sha256": hashlib.sha256(body).hexdigest(), "messages": messages}
        await _respond(send, json.dumps(found).encode())
    elif path == "/stream-echo":
        await _start(send, b"")
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            body = message.get("body", b"")
            if body:
                await send({"type": "http.response.body", "body": b"%d\n" % len(body), "more_body": True})
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.body", "body": b"end\n"})
    elif path == "/download":
        await _start(send, b"")
        for index in range(int(query.get("parts", "64"))):
            await send({"type": "http.response.body", "body": bytes([index % 251]) * 16384, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/trailers":
        payload = b"payload " * 100
        await _start(send, payload, trailers=True)
        await send({"type": "http.response.body", "body": b""})
        checksum = hashlib.sha256(payload).hexdigest().encode()
        await send({"type": "http.response.trailers", "headers": [(b"x-checksum", checksum)], "more_trailers": False})
    elif path == "/held":
        await _start(send, b"started\n")
        length = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.add(query["id"])
                return
            length += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.body", "body": b"received %d" % length})
    elif path == "/seen":
        await _respond(send, b"yes" if query["id"] in disconnected else b"no")
    elif path == "/pid":
        await _respond(send, str(os.getpid()).encode())
    elif path == "/log":
        await _respond(send, json.dumps(calls).encode())
    else:
        await _respond(send, b"not found", 404)
