"""One upload endpoint in each interface, for tests/test_body_limit.py: the
same request body limit must hold whichever interface reads the body and
whether or not the request declared its length.

* ``asgi``: raw ASGI, reading the body as it comes. ``POST /upload?id=X``
  answers ``{"length": N, "sha256": ...}`` once the body ended;
  ``POST /upload-after-start?id=X`` sends its response head and a first
  chunk before it reads, then the same JSON as the last chunk. Both record
  how the body ended in ``RUSHTEST_MARKER_DIR/upload-X``: ``ended N`` (the
  whole body, N bytes) or ``http.disconnect N`` (N bytes before it), and
  return without answering after a disconnect (there is no one to answer).
  ``reading-X`` appears there once the first body message arrived.
  ``GET /hello``: ``hello``.
* ``wsgi``: ``POST /upload`` reads ``wsgi.input`` to its end; the same JSON.
* ``app``: the rush App, ``POST /upload`` from ``request.body``; the same JSON.

It runs unchanged under uvicorn and hypercorn, the oracles for a body at
the limit.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from rush import App, Request

from tests.apps._shared import write_marker_file

MARKER_DIR = os.environ.get("RUSHTEST_MARKER_DIR", "")


def summary(body: bytes) -> dict[str, Any]:
    return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


async def asgi(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    if scope["type"] == "lifespan":
        # startup, then shutdown: each acknowledged.
        for _ in range(2):
            message = await receive()
            await send({"type": f"{message['type']}.complete"})
        return
    path = scope["path"]
    if path == "/hello":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"hello"})
        return
    request_id = parse_qs(scope["query_string"].decode()).get("id", ["0"])[0]
    started = path == "/upload-after-start"
    if started:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"reading;", "more_body": True})
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if MARKER_DIR:
                received = sum(len(chunk) for chunk in chunks)
                write_marker_file(MARKER_DIR, f"upload-{request_id}", f"http.disconnect {received}")
            return
        if not chunks and MARKER_DIR:
            # The body flows: what the client sends next reaches a running app.
            write_marker_file(MARKER_DIR, f"reading-{request_id}", "")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    if MARKER_DIR:
        write_marker_file(MARKER_DIR, f"upload-{request_id}", f"ended {len(body)}")
    answer = json.dumps(summary(body)).encode()
    if not started:
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def wsgi(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    if environ["PATH_INFO"] == "/hello":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]
    stream = environ["wsgi.input"]
    pieces = []
    # At most a few thousand reads: the server bounds what it hands over.
    for _ in range(100_000):
        piece = stream.read(65536)
        if not piece:
            break
        pieces.append(piece)
    answer = json.dumps(summary(b"".join(pieces))).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(answer)))])
    return [answer]


app = App()


@app.get("/hello")
def hello(request: Request) -> str:
    return "hello"


@app.post("/upload")
def upload(request: Request) -> dict[str, Any]:
    return summary(request.body)
