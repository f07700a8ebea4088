"""An app with ``async def`` handlers that really suspend (served on asyncio).

``GET /wait/{key}`` suspends until some request ``GET /release/{key}`` comes
in (on any connection), which makes interleaving testable without timing.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

from rush import App, Request, Response

from tests.apps._shared import GATE_LIMIT, echo, gate_paths

app = App()

calls = 0
events: dict[str, asyncio.Event] = {}


def count() -> None:
    global calls
    calls += 1


def event(key: str) -> asyncio.Event:
    return events.setdefault(key, asyncio.Event())


@app.get("/count")
def get_count(request: Request) -> dict[str, int]:
    return {"calls": calls}


@app.get("/wait/{key}")
async def wait(request: Request, key: str) -> dict[str, Any]:
    count()
    await event(key).wait()
    return {"key": key, "waited": True}


@app.get("/release/{key}")
async def release(request: Request, key: str) -> str:
    count()
    event(key).set()
    return f"released {key}"


@app.get("/sleep")
async def sleep(request: Request) -> dict[str, Any]:
    count()
    await asyncio.sleep(float(request.query.get("ms", "10")) / 1000)
    return {"id": request.query.get("id"), "slept": True}


@app.get("/fast")
def fast(request: Request) -> dict[str, Any]:
    count()
    return {"id": request.query.get("id"), "slept": False}


@app.get("/task")
def task(request: Request) -> dict[str, Any]:
    # A plain handler runs outside any asyncio task, even right after an
    # async one on the same connection.
    return {"task": asyncio.current_task() is not None}


@app.get("/no-suspend")
async def no_suspend(request: Request) -> str:
    count()
    return "finished without suspending"


@app.route("/echo", methods=["GET", "POST"])
async def async_echo(request: Request) -> dict[str, Any]:
    count()
    await asyncio.sleep(0)
    return echo(request)


@app.post("/digest")
async def digest(request: Request) -> dict[str, Any]:
    count()
    await asyncio.sleep(0)
    body = request.body
    return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


@app.get("/loop")
async def loop_type(request: Request) -> str:
    count()
    loop = type(asyncio.get_running_loop())
    return f"{loop.__module__}.{loop.__qualname__}"


@app.get("/raise-after-await")
async def raise_after_await(request: Request) -> str:
    count()
    await asyncio.sleep(0.001)
    raise ValueError("async boom after await")


@app.get("/raise-before-await")
async def raise_before_await(request: Request) -> str:
    count()
    raise ValueError("async boom before await")


@app.get("/response")
async def response(request: Request) -> Response:
    count()
    await asyncio.sleep(0.001)
    return Response("async response", status=201, headers={"X-Async": "1"})


@app.get("/gate")
async def gate(request: Request) -> str:
    count()
    entered, released = gate_paths(request)
    entered.write_text(str(os.getpid()))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + GATE_LIMIT
    while not released.exists():
        if loop.time() > deadline:
            raise TimeoutError("the test never released the gate")
        await asyncio.sleep(0.01)
    return f"released {released.name}"


@app.get("/file")
async def file(request: Request) -> Response:
    """``Response.file`` of the path in ``?path=``, after a real suspension."""
    await asyncio.sleep(0)
    return Response.file(request.query["path"])
