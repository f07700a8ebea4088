"""A rush App whose handlers report the ContextVar they find, then set it (test_diff_isolation.py).

``/plain?set=X`` is a plain ``def`` handler, ``/async?set=X&suspend=N`` an
``async def`` one (``N`` awaits of ``asyncio.sleep(0)`` after setting). Each
answers ``{"request_var": <as found>}``, ``"unset"`` when the request started
clean, then sets the var to ``X``. The oracle is the same request alone: the
first request a fresh server answers finds ``"unset"``, and so must every other.
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref

from rush import App, Request

app = App()

request_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="unset")
# The task of the last /task request (weakly: a finished task may go away).
last_task: weakref.ref | None = None


@app.get("/plain")
def plain(req: Request):
    found = request_var.get()
    if "set" in req.query:
        request_var.set(req.query["set"])
    return {"request_var": found}


@app.get("/async")
async def asynchronous(req: Request):
    found = request_var.get()
    if "set" in req.query:
        request_var.set(req.query["set"])
    for _ in range(int(req.query.get("suspend", "0"))):
        await asyncio.sleep(0)
    return {"request_var": found}


@app.get("/task")
async def task(req: Request):
    global last_task
    current = asyncio.current_task()
    answer = {"previous_requests_task": last_task is not None and last_task() is current}
    last_task = weakref.ref(current)
    return answer
