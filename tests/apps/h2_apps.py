"""Apps for tests/test_http2.py, one per interface, each answering the same paths
(served with ``rush tests.apps.h2_apps:<name> --http auto``):

* ``app`` (rush App), ``wsgi`` and ``asgi`` (raw ASGI 3):

  - ``/hello``: ``hello``;
  - ``/info``: JSON with the protocol the app was told (``http_version`` /
    ``SERVER_PROTOCOL`` / ``Request.http_version``), the ``host``, the ``cookie``
    and the header names it saw;
  - ``/echo`` (POST): JSON with the body's length and SHA-256;

* ``asgi`` also:

  - ``/scope``: the scope's fields as JSON (compared with hypercorn's);
  - ``/stream?parts=N``: N parts of 1000 bytes, each sent with ``more_body``;
  - ``/receive``: the body read through ``receive()``, message by message: JSON
    with the length, SHA-256 and how many ``http.request`` messages came;
  - ``/wait?id=X``: reads its body, then waits for ``http.disconnect`` and notes
    it; ``/seen?id=X`` says whether it was noted;
  - ``/upload?id=X``: reads its body message by message and notes it under X if
    ``http.disconnect`` comes first (a stalled body timed out);
  - ``/answer-first?id=X``: starts its response (``started``), then reads its
    body; notes X if ``http.disconnect`` comes first;
  - ``/hints-then-wait?id=X``: suspends, sends an early hint, then waits until
    ``/release?id=X`` before its response (``released``);
  - ``/endless``: a response that never ends; logs to stderr when the app is
    told ``http.disconnect``;
  - ``/hints``: two ``http.response.early_hint`` messages (three links), then
    ``hinted``, with the scope's extension names in ``x-extensions``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
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
        "host": request.headers.get("host"),
        "cookie": request.headers.get("cookie"),
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
        headers = sorted(key[5:].lower().replace("_", "-") for key in environ if key.startswith("HTTP_"))
        body = json.dumps(
            {
                "http_version": environ["SERVER_PROTOCOL"],
                "host": environ.get("HTTP_HOST"),
                "cookie": environ.get("HTTP_COOKIE"),
                "headers": headers,
            }
        ).encode()
    elif path == "/echo":
        data = environ["wsgi.input"].read()
        body = json.dumps({"length": len(data), "sha256": hashlib.sha256(data).hexdigest()}).encode()
    else:
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


# Requests to /wait whose app saw http.disconnect, by id.
disconnected: set[str] = set()
# /hints-then-wait requests waiting for their /release, by id.
releases: dict[str, asyncio.Event] = {}


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
    if path == "/hello":
        await _respond(send, b"hello")
    elif path == "/info":
        found = {
            "http_version": scope["http_version"],
            "host": next((value for name, value in headers if name == "host"), None),
            "cookie": [value for name, value in headers if name == "cookie"],
            "headers": sorted({name for name, _ in headers}),
            "scheme": scope["scheme"],
        }
        await _respond(send, json.dumps(found).encode())
    elif path == "/scope":
        described = {key: scope[key] for key in ("type", "http_version", "method", "scheme", "path", "root_path")}
        described["raw_path"] = scope["raw_path"].decode("latin-1")
        described["query_string"] = scope["query_string"].decode("latin-1")
        described["headers"] = sorted([name, value] for name, value in headers)
        await _respond(send, json.dumps(described).encode())
    elif path in ("/echo", "/receive"):
        body, messages = await _read_body(receive)
        found = {"length": len(body), "sha256": hashlib.sha256(body).hexdigest(), "messages": messages}
        await _respond(send, json.dumps(found).encode())
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for index in range(int(query.get("parts", "10"))):
            await send({"type": "http.response.body", "body": bytes([65 + index % 26]) * 1000, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/endless":
        # Never ends on its own: only the client leaving (or the drain's
        # deadline closing the connection) stops it.
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await _read_body(receive)
        told = asyncio.ensure_future(receive())
        # Logged as soon as receive() says so: at the drain's deadline the
        # worker cancels this task right after.
        told.add_done_callback(
            lambda done: print(f"endless stream told {done.result()['type']}", file=sys.stderr, flush=True)
        )
        while not told.done():
            try:
                await send({"type": "http.response.body", "body": b"x" * 1000, "more_body": True})
            except OSError:
                pass  # the client is gone; receive() says so next
            await asyncio.sleep(0.02)
    elif path == "/wait":
        await _read_body(receive)
        message = await receive()
        if message["type"] == "http.disconnect":
            disconnected.add(query["id"])
    elif path == "/upload":
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.add(query["id"])
                return
            if not message.get("more_body", False):
                break
        await _respond(send, b"uploaded")
    elif path == "/answer-first":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"started", "more_body": True})
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                disconnected.add(query["id"])
                return
            if not message.get("more_body", False):
                break
        await send({"type": "http.response.body", "body": b""})
    elif path == "/hints-then-wait":
        release = releases.setdefault(query["id"], asyncio.Event())
        await asyncio.sleep(0)
        await send({"type": "http.response.early_hint", "links": [b"</style.css>; rel=preload; as=style"]})
        await release.wait()
        await _respond(send, b"released")
    elif path == "/release":
        releases.setdefault(query["id"], asyncio.Event()).set()
        await _respond(send, b"ok")
    elif path == "/hints":
        await send({"type": "http.response.early_hint", "links": [b"</style.css>; rel=preload; as=style"]})
        await send(
            {
                "type": "http.response.early_hint",
                "links": [b"</app.js>; rel=preload; as=script", b"<https://cdn.example>; rel=preconnect"],
            }
        )
        extensions = ",".join(sorted(scope.get("extensions", {}))).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"x-extensions", extensions)],
            }
        )
        await send({"type": "http.response.body", "body": b"hinted"})
    elif path == "/seen":
        await _respond(send, b"yes" if query["id"] in disconnected else b"no")
    else:
        await _respond(send, b"not found", 404)
