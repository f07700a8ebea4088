"""A FastAPI app whose endpoints report the ContextVar they find (tests/differential/test_diff_isolation.py).

Each answers ``{"request_var": <as found>}`` (``"unset"`` when the request
started clean) and, given ``?set=X``, leaves ``X`` in the var for a later
request to find, each in its own way:

* ``/sync``: a plain ``def`` endpoint (FastAPI runs it on a thread, in a copy
  of the request's context) behind a dependency with ``yield`` that sets it.
* ``/async``: an ``async def`` endpoint behind the same dependency, which
  suspends once before answering.
* ``/background``: sets it in an async background task, which runs after the response.
"""

from __future__ import annotations

import asyncio
import contextvars

from fastapi import BackgroundTasks, Depends, FastAPI

app = FastAPI()

request_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="unset")


async def found_then_set(set: str | None = None):
    found = request_var.get()
    if set is not None:
        request_var.set(set)
    yield found


@app.get("/sync")
def synchronous(found: str = Depends(found_then_set)):
    return {"request_var": found}


@app.get("/async")
async def asynchronous(found: str = Depends(found_then_set)):
    await asyncio.sleep(0)
    return {"request_var": found}


async def set_later(value: str) -> None:
    # An async background task runs in the request's own context (a plain one would run on a
    # thread, in a copy).
    request_var.set(value)


@app.get("/background")
async def background(tasks: BackgroundTasks, set: str | None = None):
    if set is not None:
        tasks.add_task(set_later, set)
    return {"request_var": request_var.get()}
