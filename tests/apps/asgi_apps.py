"""Raw ASGI 3 apps for tests/test_asgi.py (served with ``rush tests.apps.asgi_apps:<name>``).

* ``app``: supports lifespan (startup fills ``state``; with
  ``RUSHTEST_MARKER_DIR`` set, startup and shutdown each write a marker file
  there) and dispatches HTTP requests on ``scope["path"]``:

  - ``/scope...``: the scope as JSON (bytes as latin-1 text, headers as pairs);
  - ``/echo``: every ``receive()`` message up to the end of the body;
  - ``/disconnect?id=X``: responds, then records what the next ``receive()``
    returns, and what a ``receive()`` started *before* the response saw and
    when (``/events?id=X`` lists the records);
  - ``/state[?add=1]``: the lifespan state (``add`` mutates this request's copy);
  - ``/stream?chunks=N[&suspend=1][&length=1]``: a body in N ``more_body``
    messages (``suspend`` awaits ``asyncio.sleep(0)`` between them, ``length``
    declares a Content-Length);
  - ``/stream-held?key=K``: the first chunk, then waits for ``/release/K``;
  - ``/stream-until-disconnect?id=X``: the first chunk, then waits for
    ``receive()`` to tell that the client left, or for ``/release/X``
    (recorded in ``/events?id=X``);
  - ``/big?size=N``: N bytes in 64 KiB messages, suspending between them;
  - ``/sleep?ms=N&id=I``: really suspends (``asyncio.sleep``) before answering;
  - ``/wait/K`` (suspends until ``/release/K``), ``/release/K``;
  - ``/violation?kind=...[&suspend=1]``: a protocol violation (see VIOLATIONS);
  - ``/cookies``: repeated Set-Cookie headers;
  - ``/current-task[?suspend=1]``: whether ``asyncio.current_task()`` is a task, the same after a suspension;
  - ``/send-calls``: ``send()`` called wrongly, with a keyword, with run-time keys;
  - anything else: 404.

* ``no_lifespan_app``: fails on the lifespan scope (does not support it).
* ``failing_startup_app``: answers startup with ``lifespan.startup.failed``.
* ``instance_app``: an object with an ``async def __call__``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from tests.apps._shared import write_marker_file

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

MARKER_DIR = os.environ.get("RUSHTEST_MARKER_DIR")
STARTUP_FAILURE = "the database is unreachable (test)"

records: dict[str, list[Any]] = {}
events: dict[str, asyncio.Event] = {}


def event(key: str) -> asyncio.Event:
    return events.setdefault(key, asyncio.Event())


def jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, list | tuple):
        return [jsonable(item) for item in value]
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return type(value).__name__


async def respond(send: Send, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def respond_json(send: Send, value: Any, status: int = 200) -> None:
    await respond(send, status, json.dumps(value).encode())


def write_marker(name: str) -> None:
    if MARKER_DIR:
        write_marker_file(MARKER_DIR, name, str(os.getpid()))


async def lifespan(scope: Scope, receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            scope["state"]["greeting"] = "hello from startup"
            scope["state"]["shared"] = {"items": []}
            write_marker("startup")
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            write_marker("shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return


async def stream(scope: Scope, send: Send, params: dict[str, str]) -> None:
    chunks = [f"chunk {number};".encode() for number in range(int(params.get("chunks", "3")))]
    headers = [(b"content-type", b"text/plain")]
    if "length" in params:
        headers.append((b"content-length", str(sum(map(len, chunks))).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for chunk in chunks:
        if "suspend" in params:
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def violation(kind: str, suspend: bool, send: Send) -> None:
    """Breaks the protocol in the way ``kind`` names."""
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
    declared = {
        "type": "http.response.start",
        "status": 200,
        "headers": [(b"content-type", b"text/plain"), (b"content-length", b"10")],
    }

    async def pause() -> None:
        if suspend:
            await asyncio.sleep(0)

    if kind == "start-twice":
        await send(start)
        await pause()
        await send(start)
        await send({"type": "http.response.body", "body": b"after two starts"})
    elif kind == "body-before-start":
        await pause()
        await send({"type": "http.response.body", "body": b"no start"})
    elif kind == "crlf-value":
        await pause()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-bad", b"ok\r\nx-injected: 1")]})
        await send({"type": "http.response.body", "body": b"crlf"})
    elif kind == "crlf-name":
        await pause()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-bad\r\nx-injected", b"1")]})
        await send({"type": "http.response.body", "body": b"crlf"})
    elif kind == "too-long":
        await send(declared)
        await pause()
        await send({"type": "http.response.body", "body": b"0123456789-and-more"})
    elif kind == "too-long-later":
        await send(declared)
        await pause()
        await send({"type": "http.response.body", "body": b"01234", "more_body": True})
        await pause()
        await send({"type": "http.response.body", "body": b"56789-and-more"})
    elif kind == "too-short":
        await send(declared)
        await pause()
        await send({"type": "http.response.body", "body": b"01234"})
    elif kind == "no-response":
        await pause()
    elif kind == "start-only":
        await send(start)
        await pause()
    elif kind == "unfinished-stream":
        await send(start)
        await pause()
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        await pause()
    elif kind == "raise-before-start":
        await pause()
        raise RuntimeError("the app failed before starting its response")
    elif kind == "raise-after-start":
        await send(start)
        await pause()
        raise RuntimeError("the app failed after starting its response")
    elif kind == "raise-mid-stream":
        await send(start)
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        await pause()
        raise RuntimeError("the app failed in the middle of its body")
    elif kind == "bad-status":
        await pause()
        await send({"type": "http.response.start", "status": 10000, "headers": []})
        await send({"type": "http.response.body", "body": b"bad status"})
    elif kind == "str-body":
        await send(start)
        await pause()
        await send({"type": "http.response.body", "body": "text, not bytes"})
    elif kind == "unknown-message":
        await pause()
        await send({"type": "http.response.nonsense"})
    elif kind == "raise-after-complete":
        # What Starlette's ServerErrorMiddleware does: send the error page, then re-raise for the server to log.
        await send(start)
        await pause()
        await send({"type": "http.response.body", "body": b"complete"})
        raise RuntimeError("raised after a complete response")
    elif kind == "body-after-complete":
        await send(start)
        await send({"type": "http.response.body", "body": b"complete"})
        await pause()
        await send({"type": "http.response.body", "body": b"after the end"})
    else:
        raise ValueError(f"unknown violation {kind}")


class Name(bytes):
    """A bytes subclass, as some frameworks use for header names."""


async def await_results(receive: Receive, send: Send, suspend: bool) -> None:
    """What awaiting ``receive()`` and ``send()`` gives: directly, and through
    asyncio's wrapper for awaitables (``wait_for`` drives the awaitable's
    ``__await__`` iterator with ``yield from``), before or after a suspension.
    The results go back as the body; the last send's result cannot, so a
    wrong one raises (and the request becomes a logged error)."""
    if suspend:
        await asyncio.sleep(0)
    received = await asyncio.wait_for(receive(), 5)
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    started = await send(start)
    if suspend:
        await asyncio.sleep(0)
    body = json.dumps(jsonable({"received": received, "started": repr(started)})).encode()
    finished = await asyncio.wait_for(send({"type": "http.response.body", "body": body}), 5)
    if finished is not None:
        raise AssertionError(f"await send(...) gave {finished!r}")


async def send_calls(send: Send) -> None:
    """``send()`` called as apps may call it: wrongly (each must raise
    TypeError and leave the response unharmed), with the message as the
    keyword ``message`` (as uvicorn's ``send(self, message)`` allows), and
    with keys built at run time, which are not the interned strings that
    literals in the source are, beside a key the server does not know."""
    wrong_calls: dict[str, Any] = {
        "no-argument": lambda: send(),  # type: ignore[call-arg]
        "two-arguments": lambda: send({}, {}),  # type: ignore[call-arg]
        "list": lambda: send([]),  # type: ignore[arg-type]
        "none": lambda: send(None),  # type: ignore[arg-type]
    }
    raised = {}
    for name, call in wrong_calls.items():
        try:
            await call()
        except TypeError as error:
            raised[name] = type(error).__name__
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    await send(message={**start, "x-unknown": "ignored"})
    built = "".join
    body = json.dumps(raised).encode()
    await send({built(["ty", "pe"]): built(["http.response.", "body"]), built(["bo", "dy"]): body})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    assert scope["type"] == "http"
    # scope["path"] includes root_path (the ASGI convention Starlette follows); route on the rest.
    path = scope["path"]
    if scope["root_path"] and path.startswith(scope["root_path"]):
        path = path[len(scope["root_path"]) :]
    params = {key: values[-1] for key, values in parse_qs(scope["query_string"].decode("latin-1")).items()}
    if path.startswith("/scope"):
        described = jsonable({key: value for key, value in scope.items() if key != "state"})
        described["has_state"] = "state" in scope
        await respond_json(send, described)
    elif path == "/echo":
        messages = []
        while True:
            message = await receive()
            messages.append(
                {
                    "type": message["type"],
                    "length": len(message.get("body", b"")),
                    "more_body": message.get("more_body", False),
                    "head": message.get("body", b"")[:32].decode("latin-1"),
                }
            )
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        await respond_json(send, messages)
    elif path == "/echo-hash":
        digest = hashlib.sha256()
        length = 0
        while True:
            message = await receive()
            digest.update(message.get("body", b""))
            length += len(message.get("body", b""))
            if not message.get("more_body", False):
                break
        await respond_json(send, {"length": length, "sha256": digest.hexdigest()})
    elif path == "/disconnect":
        key = params["id"]
        log = records.setdefault(key, [])
        first = await receive()
        log.append(first["type"])

        async def listen() -> None:
            message = await receive()
            log.append(f"early receive got {message['type']}")

        listener = asyncio.get_running_loop().create_task(listen())
        await asyncio.sleep(0)
        await respond(send, 200, b"responded", b"text/plain")
        log.append("response sent")
        await listener
        after = await receive()
        log.append(f"late receive got {after['type']}")
    elif path == "/events":
        await respond_json(send, records.get(params["id"], []))
    elif path == "/state":
        state = scope.get("state")
        if state is None:
            await respond_json(send, None)
            return
        before = sorted(state)
        if "add" in params:
            state["added_by_a_request"] = True
        await respond_json(send, {"keys": before, "greeting": state.get("greeting")})
    elif path == "/stream":
        await stream(scope, send, params)
    elif path == "/stream-held":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first chunk;", "more_body": True})
        await asyncio.wait_for(event(params["key"]).wait(), 30)
        await send({"type": "http.response.body", "body": b"second chunk", "more_body": False})
    elif path == "/stream-until-disconnect":
        # Like server-sent events: stream until receive() says the client left
        # (or until the test releases the app with /release/<id>).
        key = params["id"]
        log = records.setdefault(key, [])
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"first chunk;", "more_body": True})
        log.append("streaming")
        receiving = asyncio.ensure_future(receive())
        released = asyncio.ensure_future(event(key).wait())
        done, pending = await asyncio.wait({receiving, released}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        log.append(receiving.result()["type"] if receiving in done else "released by the test")
    elif path == "/big":
        size = int(params["size"])
        block = bytes(range(256)) * 256
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/x-big")]})
        sent = 0
        while sent < size:
            piece = block[: min(len(block), size - sent)]
            sent += len(piece)
            await asyncio.sleep(0)
            await send({"type": "http.response.body", "body": piece, "more_body": sent < size})
    elif path == "/sleep":
        await asyncio.sleep(float(params.get("ms", "10")) / 1000)
        await respond_json(send, {"id": params.get("id")})
    elif path.startswith("/wait/"):
        key = path.removeprefix("/wait/")
        await asyncio.wait_for(event(key).wait(), 30)
        await respond_json(send, {"waited": key})
    elif path.startswith("/release/"):
        event(path.removeprefix("/release/")).set()
        await respond(send, 200, b"released", b"text/plain")
    elif path == "/violation":
        await violation(params["kind"], "suspend" in params, send)
    elif path == "/taint-scope":
        # Changes its own scope in place: the next request's must not show it.
        scope["scheme"] = "tainted"
        scope["tainted"] = True
        scope["headers"].append((b"x-tainted", b"1"))
        await respond_json(send, {"tainted": True})
    elif path == "/header-shapes":
        # The response headers as an app may shape them: a list of tuples
        # (the usual), a tuple, a generator, bytes subclasses, a bytearray.
        pairs = [(b"content-type", b"text/plain"), (b"x-shape", params["shape"].encode())]
        shaped: Any = {
            "list": pairs,
            "tuple": tuple(pairs),
            "generator": (pair for pair in pairs),
            "subclass": [(Name(name), Name(value)) for name, value in pairs],
            "bytearray": [(name, bytearray(value)) for name, value in pairs],
        }[params["shape"]]
        await send({"type": "http.response.start", "status": 200, "headers": shaped})
        await send({"type": "http.response.body", "body": b"shaped"})
    elif path == "/current-task":
        # anyio and sniffio ask asyncio which task runs them: a task, the
        # same one after a real suspension.
        before = asyncio.current_task()
        if "suspend" in params:
            await asyncio.sleep(0)
        after = asyncio.current_task()
        await respond_json(send, {"task": isinstance(before, asyncio.Task), "same": before is after})
    elif path == "/send-calls":
        await send_calls(send)
    elif path == "/await-results":
        await await_results(receive, send, "suspend" in params)
    elif path == "/cookies":
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/plain"), (b"set-cookie", b"a=1"), (b"set-cookie", b"b=2")],
            }
        )
        await send({"type": "http.response.body", "body": b"cookies"})
    else:
        await respond(send, 404, b"not found", b"text/plain")


async def no_lifespan_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        raise RuntimeError(f"this app only speaks http, not {scope['type']}")
    if scope["path"] == "/state":
        await respond(send, 200, f"state {scope.get('state', 'absent')}".encode(), b"text/plain")
        return
    await respond(send, 200, b"no lifespan here", b"text/plain")


async def failing_startup_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        message = await receive()
        assert message["type"] == "lifespan.startup"
        await send({"type": "lifespan.startup.failed", "message": STARTUP_FAILURE})
        return
    await respond(send, 200, b"should never serve", b"text/plain")


class InstanceApp:
    """An ASGI app that is an object with an ``async def __call__``."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await respond(send, 200, f"instance app at {scope['path']}".encode(), b"text/plain")


instance_app = InstanceApp()
