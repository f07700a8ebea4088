"""A raw ASGI app that reports what one request can see of another (tests/differential/test_diff_isolation.py).

Every HTTP answer is JSON. Each endpoint first reports what the request found
when it started, then leaves a mark of its own, so the *next* request shows
whether the mark reached it:

* ``/ctx?set=X&suspend=N&body=1``: the ContextVar ``request_var`` as found
  (``"unset"`` when clean), and the lifespan-startup and module-level vars;
  then sets ``request_var`` to ``X``, waits for a ``/release`` (as ``/hold``
  does) if ``hold-once=T`` is given and no request with token ``T`` held
  before, reads the body if ``body`` is given
  (``receive()`` suspends when it arrives late) and awaits
  ``asyncio.sleep(0)`` ``N`` times (a real suspension) before answering, with
  ``Cache-Control: no-store`` if ``no-store=1`` is given.
* ``/task?name=X&suspend=N``: whether ``asyncio.current_task()`` is the task of
  the previous ``/task`` request, its name as found, and whether it is the same
  task after the suspensions; then renames it ``X``.
* ``/kept-task``: whether ``asyncio.current_task()`` is one an earlier
  ``/kept-task`` request kept (a strong reference, as a registry keyed by task
  keeps one); then keeps its own.
* ``/hold`` and ``/release``: ``/hold`` waits (an ``asyncio.Event``) until a
  ``/release`` runs, which first waits until a ``/hold`` is waiting; each
  reports whether its task is the other's.
* ``/scope``: whether the marks an earlier ``/scope`` request left in its own
  scope are here (a top-level key, a header appended to ``scope["headers"]``, a
  key in ``scope["extensions"]`` and in each of its dicts, a key in
  ``scope["state"]``, an item appended to ``server``, ``client`` and a
  WebSocket's ``subprotocols`` where they are lists); then leaves them.
* ``/decimal?set=N``: the precision of ``decimal.getcontext()`` as found, then
  sets it to ``N`` (the decimal context lives in a ContextVar).
* ``/raise`` fails; ``/exception`` answers the exception being handled when it
  runs (none, unless one leaked out of an earlier request).
* ``/body``: reads its body and answers it; ``/ignore-body`` answers without
  reading it.
* WebSocket ``/ws``: accepts, reports the same as ``/ctx`` and ``/scope`` in one
  text message (query ``set=X`` sets ``request_var`` to ``X`` after it), then
  closes.

``plain_entry`` is the same app behind a plain (not ``async``) callable
that returns the app's coroutine, as ASGI wrappers written as classes or
functions can: ``/ctx?entry=X`` makes the plain part set ``request_var`` to
``X`` (and the coroutine then reports it as found, so it is not compared).

The lifespan startup sets ``lifespan_var`` (under uvicorn and hypercorn the
startup runs in a task of its own, so requests never see it) and puts
``started`` into the lifespan state; ``module_var`` is set at import, which
every request sees.
"""

from __future__ import annotations

import asyncio
import contextvars
import decimal
import json
import sys
import weakref
from urllib.parse import parse_qs

request_var: contextvars.ContextVar[str] = contextvars.ContextVar("request_var", default="unset")
lifespan_var: contextvars.ContextVar[str] = contextvars.ContextVar("lifespan_var", default="unset")
module_var: contextvars.ContextVar[str] = contextvars.ContextVar("module_var", default="unset")
module_var.set("module")

# The tasks /kept-task requests kept (strongly).
kept_tasks: list[asyncio.Task] = []
# The task of the last /task request (weakly: a finished task may go away).
last_task: weakref.ref | None = None
# The task of the /hold request waiting for /release, and the event it waits on.
holding: dict[str, object] = {}
# The hold-once tokens of /ctx requests that held already.
held: set[str] = {""}


async def hold() -> None:
    """Waits until a ``/release`` request runs."""
    event = asyncio.Event()
    holding.update(task=asyncio.current_task(), event=event)
    holding.setdefault("entered", asyncio.Event()).set()
    await event.wait()


async def respond(send, answer, *extra_headers: tuple[bytes, bytes]) -> None:
    body = json.dumps(answer, sort_keys=True).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += extra_headers
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


def context_view() -> dict:
    return {"request_var": request_var.get(), "lifespan_var": lifespan_var.get(), "module_var": module_var.get()}


def scope_marks(scope) -> dict:
    """Which marks of an earlier request this scope carries."""
    extensions = scope.get("extensions") or {}
    state = scope.get("state")
    return {
        "key": "isolation.mark" in scope,
        "header": any(bytes(name) == b"x-isolation-mark" for name, _ in scope.get("headers", ())),
        "extension": "isolation.mark" in extensions,
        "extension_value": any(isinstance(value, dict) and "isolation.mark" in value for value in extensions.values()),
        "state": isinstance(state, dict) and "isolation.mark" in state,
        "server": len(scope.get("server") or ()) != 2,
        "client": len(scope.get("client") or ()) != 2,
        "subprotocols": "isolation.mark" in (scope.get("subprotocols") or ()),
        "state_started": isinstance(state, dict) and state.get("started") == "yes",
    }


def leave_marks(scope) -> None:
    scope["isolation.mark"] = True
    headers = scope.get("headers")
    if isinstance(headers, list):
        headers.append((b"x-isolation-mark", b"1"))
    extensions = scope.get("extensions")
    if isinstance(extensions, dict):
        for value in extensions.values():
            if isinstance(value, dict):
                value["isolation.mark"] = True
        extensions["isolation.mark"] = {}
    if isinstance(scope.get("state"), dict):
        scope["state"]["isolation.mark"] = True
    for key in ("server", "client", "subprotocols"):
        if isinstance(scope.get(key), list):
            scope[key].append("isolation.mark")


async def lifespan(scope, receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            lifespan_var.set("lifespan")
            if isinstance(scope.get("state"), dict):
                scope["state"]["started"] = "yes"
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def websocket(scope, receive, send, query) -> None:
    found = {**context_view(), **{f"scope.{key}": value for key, value in scope_marks(scope).items()}}
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    leave_marks(scope)
    if "set" in query:
        request_var.set(query["set"])
    await send({"type": "websocket.send", "text": json.dumps(found, sort_keys=True)})
    await send({"type": "websocket.close", "code": 1000})


async def app(scope, receive, send) -> None:
    global last_task
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    query = {key: values[-1] for key, values in parse_qs(scope.get("query_string", b"").decode()).items()}
    if scope["type"] == "websocket":
        await websocket(scope, receive, send, query)
        return
    path = scope["path"]
    suspensions = int(query.get("suspend", "0"))
    if path == "/ctx":
        answer = context_view()
        if "set" in query:
            request_var.set(query["set"])
        if query.get("hold-once", "") not in held:
            held.add(query["hold-once"])
            await hold()
            holding.pop("releaser")
        if "body" in query:
            answer["body_length"] = len(await read_body(receive))
        for _ in range(suspensions):
            await asyncio.sleep(0)
        await respond(send, answer, *([(b"cache-control", b"no-store")] if "no-store" in query else []))
    elif path == "/task":
        task = asyncio.current_task()
        answer = {
            "previous_requests_task": last_task is not None and last_task() is task,
            "name_was_set_by_a_request": task.get_name().startswith("isolation-"),
        }
        last_task = weakref.ref(task)
        if "name" in query:
            task.set_name("isolation-" + query["name"])
        for _ in range(suspensions):
            await asyncio.sleep(0)
        answer["same_task_after_suspending"] = asyncio.current_task() is task
        await respond(send, answer)
    elif path == "/kept-task":
        task = asyncio.current_task()
        answer = {"kept_by_an_earlier_request": any(kept is task for kept in kept_tasks)}
        kept_tasks.append(task)
        await respond(send, answer)
    elif path == "/hold":
        await hold()
        await respond(send, {"released_by_own_task": holding.pop("releaser") is asyncio.current_task()})
    elif path == "/release":
        await holding.setdefault("entered", asyncio.Event()).wait()
        task = asyncio.current_task()
        holding["releaser"] = task
        answer = {"holders_task": holding.get("task") is task}
        holding.pop("entered")
        holding.pop("event").set()
        await respond(send, answer)
    elif path == "/decimal":
        answer = {"precision": decimal.getcontext().prec}
        if "set" in query:
            decimal.getcontext().prec = int(query["set"])
        await respond(send, answer)
    elif path == "/raise":
        raise RuntimeError("raised on purpose")
    elif path == "/exception":
        await respond(send, {"handling": repr(sys.exc_info()[1])})
    elif path == "/body":
        await respond(send, {"body": (await read_body(receive)).decode("latin-1")})
    elif path == "/ignore-body":
        await respond(send, {"ignored": True})
    elif path == "/scope":
        answer = scope_marks(scope)
        leave_marks(scope)
        await respond(send, answer)
    else:
        await respond(send, {"path": path})


def plain_entry(scope, receive, send):
    """The app behind a plain callable: whatever it sets runs before the app's first step."""
    if scope["type"] == "http":
        query = parse_qs(scope.get("query_string", b"").decode())
        if "entry" in query:
            request_var.set(query["entry"][-1])
    return app(scope, receive, send)
