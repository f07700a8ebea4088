"""The three apps the soak serves, one per rush server (one rush process serves one app):

* ``app``: a rush `App` (sync handlers only, so the worker runs the native loop
  alone); the soak adds a static mount with ``--static /static=DIR``.
* ``wsgi_app``: a plain WSGI callable.
* ``asgi_app``: a raw ASGI 3 callable (HTTP and lifespan).

Each answers the same small set of paths, so one client can check them all:

* ``GET /``: a fixed greeting naming the interface;
* ``GET /json``: a small JSON document;
* ``GET /items/{n}``: ``item n`` (the rush App routes it; WSGI/ASGI parse the path);
* ``POST /echo``: the body's length and SHA-256 as JSON;
* ``GET /stream?chunks=N``: N chunks of ``chunk i;`` (a generator for WSGI,
  ``more_body`` messages for ASGI; the rush App returns it whole);
* ``GET /big?size=N``: N bytes of ``b"x"`` (streamed in 64 KiB pieces by WSGI
  and ASGI), for the hostile clients that stop reading or reset mid-response;
* ``GET /sleep?ms=N``: ASGI only, really suspends before answering;
* anything else: 404.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs

from rush import App, Request, Response

GREETING = "Hello from the soak ({interface})"
JSON_DOC = {"soak": True, "numbers": [1, 2, 3], "text": "h\u00e9llo"}
PIECE = 64 * 1024
# /big refuses more than this: a hostile client cannot make a worker build a huge body.
BIG_LIMIT = 16 * 1024 * 1024


def stream_chunks(count: int) -> list[bytes]:
    return [f"chunk {index};".encode() for index in range(min(count, 1000))]


def echo_summary(body: bytes) -> dict[str, Any]:
    return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def big_size(text: str | None) -> int:
    return max(0, min(int(text or PIECE), BIG_LIMIT))


# ---------------------------------------------------------------------------
# rush App

app = App()


@app.get("/")
def index(request: Request) -> str:
    return GREETING.format(interface="rush")


@app.get("/json")
def json_document(request: Request) -> dict[str, Any]:
    return JSON_DOC


@app.get("/items/{number}")
def item(request: Request, number: str) -> str:
    return f"item {number}"


@app.post("/echo")
def echo(request: Request) -> dict[str, Any]:
    return echo_summary(request.body)


@app.get("/stream")
def stream(request: Request) -> bytes:
    return b"".join(stream_chunks(int(request.query.get("chunks", "8"))))


@app.get("/big")
def big(request: Request) -> Response:
    return Response(b"x" * big_size(request.query.get("size")), content_type="application/octet-stream")


app.redirect("/old", "/", status=301)


# ---------------------------------------------------------------------------
# WSGI

StartResponse = Callable[..., Any]


def wsgi_respond(start_response: StartResponse, status: str, body: bytes, content_type: str) -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]


def wsgi_app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    method = environ["REQUEST_METHOD"]
    params = {key: values[-1] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}
    if method in ("GET", "HEAD") and path == "/":
        return wsgi_respond(start_response, "200 OK", GREETING.format(interface="wsgi").encode(), "text/plain")
    if method == "GET" and path == "/json":
        return wsgi_respond(start_response, "200 OK", json.dumps(JSON_DOC).encode(), "application/json")
    if method == "GET" and path.startswith("/items/"):
        return wsgi_respond(start_response, "200 OK", f"item {path.removeprefix('/items/')}".encode(), "text/plain")
    if method == "POST" and path == "/echo":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length)
        return wsgi_respond(start_response, "200 OK", json.dumps(echo_summary(body)).encode(), "application/json")
    if method == "GET" and path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter(stream_chunks(int(params.get("chunks", "8"))))
    if method == "GET" and path == "/big":
        size = big_size(params.get("size"))

        def produce() -> Iterator[bytes]:
            sent = 0
            while sent < size:
                piece = min(PIECE, size - sent)
                sent += piece
                yield b"x" * piece

        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(size))])
        return produce()
    return wsgi_respond(start_response, "404 Not Found", b"not found", "text/plain")


# ---------------------------------------------------------------------------
# ASGI

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def asgi_respond(send: Send, status: int, body: bytes, content_type: bytes) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def asgi_lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def asgi_app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await asgi_lifespan(receive, send)
        return
    path = scope["path"]
    method = scope["method"]
    params = {key: values[-1] for key, values in parse_qs(scope["query_string"].decode("latin-1")).items()}
    if method in ("GET", "HEAD") and path == "/":
        await asgi_respond(send, 200, GREETING.format(interface="asgi").encode(), b"text/plain")
    elif method == "GET" and path == "/json":
        await asgi_respond(send, 200, json.dumps(JSON_DOC).encode(), b"application/json")
    elif method == "GET" and path.startswith("/items/"):
        await asgi_respond(send, 200, f"item {path.removeprefix('/items/')}".encode(), b"text/plain")
    elif method == "POST" and path == "/echo":
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        await asgi_respond(send, 200, json.dumps(echo_summary(bytes(body))).encode(), b"application/json")
    elif method == "GET" and path == "/sleep":
        await asyncio.sleep(min(float(params.get("ms", "2")), 1000.0) / 1000)
        await asgi_respond(send, 200, b"slept", b"text/plain")
    elif method == "GET" and path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        chunks = stream_chunks(int(params.get("chunks", "8")))
        for index, chunk in enumerate(chunks):
            await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": chunk, "more_body": index < len(chunks) - 1})
    elif method == "GET" and path == "/big":
        size = big_size(params.get("size"))
        headers = [(b"content-type", b"application/octet-stream"), (b"content-length", str(size).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        sent = 0
        while sent < size:
            piece = min(PIECE, size - sent)
            sent += piece
            await send({"type": "http.response.body", "body": b"x" * piece, "more_body": sent < size})
        if size == 0:
            await send({"type": "http.response.body", "body": b""})
    else:
        await asgi_respond(send, 404, b"not found", b"text/plain")
