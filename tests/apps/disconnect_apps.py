"""Streams that watch for the client leaving, written as Starlette and
sse-starlette document them, for tests/test_asgi_disconnect.py. The same
app runs under rush and under uvicorn (the oracle), so nothing here is
shaped around rush.

Each stream records how it ended in ``RUSHTEST_MARKER_DIR`` (a file named
after the stream and the request's ``?id=``): ``disconnected N`` when it
stopped because ``request.is_disconnected()`` said so after N events,
``closed N`` when the framework closed it (its own disconnect listener
won), ``finished N`` when it ran to its end. The test reads these files to learn what the app saw.

* ``/stream``: a ``StreamingResponse`` whose generator checks
  ``is_disconnected()`` before each event and runs until the client leaves.
* ``/sse``: sse-starlette's ``EventSourceResponse`` with the same loop.
* ``/finite?n=N``: N chunks, then ``is_disconnected()`` in the generator's
  ``finally`` (the response must still end with every chunk).
* ``/raw/concurrent``: raw ASGI, after ``http.response.start``: two pending
  ``receive()`` calls, one cancelled; reports whether they were one object
  and whether the other survived, then waits for ``http.disconnect``.
* ``/raw/unfinished``: raw ASGI: part of a body, then it returns while the
  client still waits (a real fault of the app).
* ``/raw/after-response``: raw ASGI: the whole response, then two
  ``receive()`` calls, whose message types it records.
* ``/raw/cancelled-then-body``: raw ASGI: a ``receive()`` is cancelled
  while the body has not arrived; the body (sent by the client once it has
  read the ``ready`` chunk) must reach the next ``receive()`` whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from tests.apps._shared import write_marker_file

MARKER_DIR = os.environ.get("RUSHTEST_MARKER_DIR", "")
# Between two events: the stream is paced by the app, as a real feed is.
EVENT_INTERVAL = 0.005


def record(kind: str, request_id: str, text: str) -> None:
    if MARKER_DIR:
        write_marker_file(MARKER_DIR, f"{kind}-{request_id}", text)


async def stream(request: Request) -> StreamingResponse:
    request_id = request.query_params.get("id", "0")

    async def events() -> AsyncIterator[str]:
        sent = 0
        outcome = "closed"
        try:
            while True:
                if await request.is_disconnected():
                    outcome = "disconnected"
                    break
                yield f"event {sent}\n"
                sent += 1
                await asyncio.sleep(EVENT_INTERVAL)
        finally:
            record("stream", request_id, f"{outcome} {sent}")

    return StreamingResponse(events(), media_type="text/plain")


async def sse(request: Request) -> EventSourceResponse:
    request_id = request.query_params.get("id", "0")

    async def events() -> AsyncIterator[dict[str, Any]]:
        sent = 0
        outcome = "closed"
        try:
            while True:
                if await request.is_disconnected():
                    outcome = "disconnected"
                    break
                yield {"event": "tick", "data": str(sent)}
                sent += 1
                await asyncio.sleep(EVENT_INTERVAL)
        finally:
            record("sse", request_id, f"{outcome} {sent}")

    return EventSourceResponse(events())


async def finite(request: Request) -> StreamingResponse:
    request_id = request.query_params.get("id", "0")
    count = int(request.query_params.get("n", "5"))

    async def chunks() -> AsyncIterator[str]:
        try:
            for index in range(count):
                yield f"chunk {index}\n"
                await asyncio.sleep(0)
        finally:
            gone = await request.is_disconnected()
            record("finite", request_id, f"{'disconnected' if gone else 'finished'} {count}")

    return StreamingResponse(chunks(), media_type="text/plain")


starlette_app = Starlette(
    routes=[Route("/stream", stream), Route("/sse", sse), Route("/finite", finite)],
)


async def concurrent_receive(receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    # The body (none) is read first, so the next receive() calls have to wait.
    assert (await receive())["type"] == "http.request"
    first, second = receive(), receive()
    same = first is second

    async def wait_for(awaitable: Any) -> dict[str, Any]:
        return await awaitable

    keeper = asyncio.ensure_future(wait_for(first))
    cancelled = asyncio.ensure_future(wait_for(second))
    await asyncio.sleep(0)
    cancelled.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled
    report = f"same={same} keeper_cancelled={keeper.cancelled()} keeper_done={keeper.done()}\n"
    await send({"type": "http.response.body", "body": report.encode(), "more_body": True})
    # The keeper goes on waiting, and hears of the client leaving.
    try:
        message = await keeper
        outcome = message["type"]
    except asyncio.CancelledError:
        outcome = "cancelled"
    record("concurrent", "0", outcome)


async def cancelled_then_body(receive: Any, send: Any) -> None:
    waiting = asyncio.ensure_future(receive())
    await asyncio.sleep(0)
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiting
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ready\n", "more_body": True})
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        body += message["body"]
        if not message.get("more_body"):
            break
    await send({"type": "http.response.body", "body": b"got " + body + b"\n"})


async def receive_after_response(receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"done\n"})
    first, second = await receive(), await receive()
    record("after-response", "0", f"{first['type']},{second['type']}")


async def unfinished(send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"part\n", "more_body": True})
    await asyncio.sleep(0)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"] == "/raw/unfinished":
        await unfinished(send)
    elif scope["type"] == "http" and scope["path"] == "/raw/after-response":
        await receive_after_response(receive, send)
    elif scope["type"] == "http" and scope["path"] == "/raw/concurrent":
        await concurrent_receive(receive, send)
    elif scope["type"] == "http" and scope["path"] == "/raw/cancelled-then-body":
        await cancelled_then_body(receive, send)
    else:
        await starlette_app(scope, receive, send)
