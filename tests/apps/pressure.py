"""Apps that push on the server's bounds, for tests/test_faults.py.

* ``asgi_app`` (ASGI):

  - ``/flood?id=X``: sends 64 KiB body messages without awaiting anything
    else, until ``send()`` raises; records the bytes it handed over and the
    exception's type in ``/record?id=X``. Without backpressure, a client that
    stops reading makes the worker buffer all of it (and the app never stops).
  - ``/flood-uncaught?id=X``: the same, but lets the exception out of the
    app (records ``{"ended": true}`` on its way out);
  - ``/record?id=X``: that record as JSON (``{}`` while the flood runs).

* ``wsgi_app`` (WSGI):

  - ``/lines?gate=PATH``: yields ``one\\n``, then waits (bounded) until the
    file PATH exists before yielding ``two\\n``: the test reads ``one``
    first, then creates PATH, proving each chunk is sent as it is made.
  - ``/endless?id=X``: an endless generator of 16 KiB chunks whose
    ``close()`` counts in ``/closed?id=X``.
  - ``/bytes?size=N``: N bytes from a generator in 64 KiB chunks.
  - ``/closed?id=X``: how often the endless body for X was closed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any
from urllib.parse import parse_qs

FLOOD_CHUNK = b"f" * 65536
GATE_WAIT_LIMIT = 15.0  # a guard: the test creates the gate right away

records: dict[str, dict[str, Any]] = {}
closes: dict[str, int] = {}


async def asgi_app(
    scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
) -> None:
    if scope["type"] != "http":
        return
    query = {key: values[0] for key, values in parse_qs(scope["query_string"].decode()).items()}
    if scope["path"] == "/flood":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        handed = 0
        try:
            while True:
                await send({"type": "http.response.body", "body": FLOOD_CHUNK, "more_body": True})
                handed += len(FLOOD_CHUNK)
        except OSError as error:
            records[query["id"]] = {"bytes": handed, "error": type(error).__name__}
            return
    if scope["path"] == "/flood-uncaught":
        # Does not catch the OSError send() raises once the client is gone.
        await send({"type": "http.response.start", "status": 200, "headers": []})
        try:
            while True:
                await send({"type": "http.response.body", "body": FLOOD_CHUNK, "more_body": True})
        finally:
            records[query["id"]] = {"ended": True}
    body = json.dumps(records.get(query.get("id", ""), {})).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


class Endless:
    def __init__(self, key: str) -> None:
        self.key = key

    def __iter__(self) -> Iterator[bytes]:
        chunk = b"e" * 16384
        while True:
            yield chunk

    def close(self) -> None:
        closes[self.key] = closes.get(self.key, 0) + 1


def gated_lines(gate: str) -> Iterator[bytes]:
    yield b"one\n"
    deadline = time.monotonic() + GATE_WAIT_LIMIT
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.005)
    yield b"two\n"


def generated_bytes(size: int) -> Iterator[bytes]:
    chunk = b"b" * 65536
    while size > 0:
        piece = chunk[: min(size, len(chunk))]
        size -= len(piece)
        yield piece


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    query = {key: values[0] for key, values in parse_qs(environ.get("QUERY_STRING", "")).items()}
    path = environ["PATH_INFO"]
    if path == "/lines":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return gated_lines(query["gate"])
    if path == "/endless":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return Endless(query["id"])
    if path == "/bytes":
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return generated_bytes(int(query["size"]))
    if path == "/closed":
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"closes": closes.get(query["id"], 0)}).encode()]
    start_response("404 Not Found", [("Content-Type", "text/plain")])
    return [b"not found"]
