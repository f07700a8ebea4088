"""A raw ASGI app for the HTTP/2 attack tests (tests/test_http2_attacks.py)
and the worker output budget over HTTP/2 (served with ``rush
tests.apps.h2_hostile:app --http auto``):

- ``/pid``: the worker's pid (the same pid answering after an attack shows
  the worker survived it);
- ``/hit``: counted, then answered ``hit``; ``/hits``: how many ``/hit``
  requests reached the app (a refused request must not);
- ``/big?size=N&part=P``: N bytes (``b`` repeated) sent in parts of P bytes
  (64 KiB unless given), each with ``more_body``, so the server paces the
  app on the client's windows;
- ``/drain``: reads the request body to its end, then answers ``drained``;
  ``/drains``: how many request bodies ``/drain`` read to their end (a
  request refused mid-body must not count);
- ``/started``: how many ``/big`` answers the app began (a request whose
  client is gone before it was dispatched must not begin one).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

hits = 0
drains = 0
bigs_started = 0


async def _respond(send: Callable[[dict[str, Any]], Any], body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Callable[[], Any], send: Callable[[dict[str, Any]], Any]) -> None:
    global hits, drains, bigs_started
    if scope["type"] != "http":
        return
    path = scope["path"]
    query = {key: values[0] for key, values in parse_qs(scope["query_string"].decode()).items()}
    if path == "/pid":
        await _respond(send, str(os.getpid()).encode())
    elif path == "/hit":
        hits += 1
        await _respond(send, b"hit")
    elif path == "/hits":
        await _respond(send, str(hits).encode())
    elif path == "/started":
        await _respond(send, str(bigs_started).encode())
    elif path == "/big":
        bigs_started += 1
        size, part = int(query.get("size", "65536")), int(query.get("part", "65536"))
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        chunk = b"b" * part
        while size > 0:
            await send({"type": "http.response.body", "body": chunk[:size], "more_body": True})
            size -= part
        await send({"type": "http.response.body", "body": b""})
    elif path == "/drain":
        while (message := await receive())["type"] == "http.request" and message.get("more_body", False):
            pass
        if message["type"] == "http.request":
            drains += 1
            await _respond(send, b"drained")
    elif path == "/drains":
        await _respond(send, str(drains).encode())
    else:
        await _respond(send, b"not found")
