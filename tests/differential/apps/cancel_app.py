"""A raw ASGI app for requests the client gives up on (tests/differential/test_diff_cancel.py):

- ``/ok``: answered at once;
- ``/stream``: an SSE-like stream, an event every 20 ms until the client leaves (``send()``
  raises or ``receive()`` says ``http.disconnect``), at most 500 events;
- ``/wait``: a long poll, awaiting ``receive()`` until the client leaves, then returning with no
  response;
- ``/slow``: busy with something other than the client (never reads ``receive()``) for up to
  10 s, then answers: a client that resets first is gone before any head;
- ``/big``: 64 KiB parts, up to 64 MiB, until the client leaves (for a client that stops
  reading);
- ``/started``: how many ``/stream``, ``/wait`` and ``/slow`` calls have begun (a test resets a
  stream only once its app runs).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]
started = 0
HEAD = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}


async def _stream(receive: Receive, send: Send) -> None:
    gone = asyncio.Event()

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.ensure_future(watch())
    await send({**HEAD, "headers": [(b"content-type", b"text/event-stream")]})
    try:
        for number in range(500):
            if gone.is_set():
                break
            await send({"type": "http.response.body", "body": f"data: {number}\n\n".encode(), "more_body": True})
            await asyncio.sleep(0.02)
        else:
            await send({"type": "http.response.body", "body": b""})
    except OSError:
        pass  # the client left (ASGI 2.4: send() raises)
    finally:
        watcher.cancel()


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
            await send({"type": "lifespan.shutdown.complete"})
        return
    global started
    path = scope["path"]
    if path in ("/stream", "/wait", "/slow"):
        started += 1
    if path == "/stream":
        await _stream(receive, send)
    elif path == "/wait":
        while (await receive())["type"] != "http.disconnect":
            pass
    elif path == "/big":
        await send(HEAD)
        part = b"b" * 65536
        try:
            for _ in range(1024):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except OSError:
            pass  # the client left
    elif path == "/slow":
        await asyncio.sleep(10)
        await send(HEAD)
        await send({"type": "http.response.body", "body": b"late"})
    else:
        await send(HEAD)
        await send({"type": "http.response.body", "body": str(started).encode() if path == "/started" else b"ok"})
