"""A Starlette app whose work outlives a graceful stop, for tests/differential/test_diff_shutdown.py.

Every handler takes ``?dir=`` (a directory the test owns, one per server) and leaves marker files
there: ``<name>.entered`` when the work starts, and it waits until the test creates
``<name>.release`` (a gate, so the test can stop the server while the work is in flight). What the
work did at the end (``done``, ``cancelled``, the ``finally`` block, a WebSocket's disconnect code)
is written to ``<name>.<what>`` so the test can read it after the process exited.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

# Tasks started with create_task outlive their handler: keep a reference, as asyncio's docs ask.
_running: set[asyncio.Task] = set()


async def gate(directory: Path, name: str) -> None:
    """Marks ``name`` as entered, then waits for the test's release file."""
    (directory / f"{name}.entered").touch()
    while not (directory / f"{name}.release").exists():
        await asyncio.sleep(0.01)


def mark(directory: Path, name: str, text: str = "") -> None:
    (directory / name).write_text(text)


async def guarded_work(directory: Path, name: str) -> None:
    """Work behind a gate that records how it ended: done, cancelled, and whether ``finally`` ran."""
    try:
        await gate(directory, name)
        mark(directory, f"{name}.done")
    except asyncio.CancelledError:
        mark(directory, f"{name}.cancelled")
        raise
    finally:
        mark(directory, f"{name}.finally")


def where(request: Request) -> Path:
    return Path(request.query_params["dir"])


async def slow(request: Request) -> PlainTextResponse:
    await gate(where(request), "slow")
    return PlainTextResponse("slow done")


async def hello(request: Request) -> PlainTextResponse:
    return PlainTextResponse("hello")


async def background(request: Request) -> PlainTextResponse:
    return PlainTextResponse("queued", background=BackgroundTask(guarded_work, where(request), "background"))


async def detached(request: Request) -> PlainTextResponse:
    task = asyncio.create_task(guarded_work(where(request), "detached"))
    _running.add(task)
    task.add_done_callback(_running.discard)
    return PlainTextResponse("started")


async def stream(request: Request) -> StreamingResponse:
    directory = where(request)

    async def pieces():
        try:
            yield "first\n"
            await gate(directory, "stream")
            yield "second\n"
        finally:
            mark(directory, "stream.finally")

    return StreamingResponse(pieces(), media_type="text/plain")


async def socket(websocket: WebSocket) -> None:
    directory = Path(websocket.query_params["dir"])
    await websocket.accept()
    await websocket.send_text("hello")
    (directory / "ws.entered").touch()
    # The raw message: Starlette's receive_text() would raise on the disconnect and hide its code.
    message = await websocket.receive()
    mark(directory, "ws.received", f"{message['type']} {message.get('code')}")


app = Starlette(
    routes=[
        Route("/slow", slow),
        Route("/hello", hello),
        Route("/background", background),
        Route("/detached", detached),
        Route("/stream", stream),
        WebSocketRoute("/ws", socket),
    ]
)
