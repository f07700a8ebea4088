"""A raw ASGI 3 app for the spec's corners (ASGI 2.4, HTTP and lifespan).

* lifespan: startup fills ``scope["state"]``; ``failing`` is the same app whose
  startup fails (``lifespan.startup.failed``).
* ``/echo``: reads the body through ``receive()`` and sends it back.
* ``/more-body``: a response in three ``more_body`` messages, no length.
* ``/state``: what this request's copy of the lifespan state holds.
* ``/scheme``: the scope's ``scheme``.
* ``/own-headers``: the app's own Server and Date, and a repeated field.
* ``/no-content``, ``/not-modified``: a 204, and a 304 that states a length.
* ``/slow-stream``: three chunks with a real wait before each (a stream rush cannot measure).
* ``/raise``, ``/raise-after-start``: an app that fails before, or after, starting its response.
* ``/feed``: a stream whose next chunk is produced only when ``/step`` is
  called, so a client sees whether each chunk arrives as it is produced.
* ``/until-disconnect``: one chunk, then ``receive()`` until the client leaves,
  then one more ``receive()`` (after the disconnect) and a ``send()`` (after
  the disconnect).
* ``/runtime-keys``: a response whose message keys are built at run time.
* ``/concurrent-receive``: one chunk, then two tasks wait in ``receive()``; one
  is cancelled, the other must still see the client leave.
* ``/cancel-own-task``: cancels the task it runs in, then answers without
  awaiting anything (the cancellation belongs to this request alone).
* ``/cancel-own-task-and-wait``: cancels the task it runs in, then suspends
  (where the cancellation reaches it).
* ``/yield-once``: suspends once (``asyncio.sleep(0)``), then answers.
* ``/asgi-dict``: answers the keys of ``scope["asgi"]``, then adds one of its
  own (a later request must not see it); ``?undo`` removes it instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

steps: asyncio.Queue[None] | None = None


async def read_body(receive):
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("client left")
        body += message.get("body", b"")
        if not message.get("more_body", False):
            return body


async def respond(send, status, body, content_type=b"text/plain"):
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def lifespan(scope, receive, send, fail=False):
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if fail:
                await send({"type": "lifespan.startup.failed", "message": "no database"})
                return
            scope["state"]["started"] = "yes"
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def start_stream(send):
    headers = [(b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"first\n", "more_body": True})


async def app(scope, receive, send):
    global steps
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send)
        return
    path = scope["path"]
    if path == "/echo":
        await respond(send, 200, await read_body(receive))
    elif path == "/more-body":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/raise":
        raise RuntimeError("failed before responding")
    elif path == "/raise-after-start":
        await start_stream(send)
        raise RuntimeError("failed mid-response")
    elif path == "/own-headers":
        headers = [(b"server", b"my-app/1.0"), (b"date", b"Thu, 01 Jan 2015 00:00:00 GMT"), (b"x-multi", b"1")]
        headers += [(b"x-multi", b"2"), (b"content-type", b"text/plain")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"own headers"})
    elif path == "/no-content":
        await send({"type": "http.response.start", "status": 204, "headers": [(b"x-note", b"empty")]})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/not-modified":
        headers = [(b"etag", b'"v1"'), (b"content-length", b"42")]
        await send({"type": "http.response.start", "status": 304, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/slow-stream":
        await read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one ", b"two ", b"three"):
            await asyncio.sleep(0.001)
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/scheme":
        await respond(send, 200, scope["scheme"].encode())
    elif path == "/state":
        state = scope.get("state", {})
        await respond(send, 200, json.dumps(state).encode(), b"application/json")
    elif path == "/feed":
        steps = asyncio.Queue()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for number in range(3):
            await send({"type": "http.response.body", "body": b"chunk %d\n" % number, "more_body": True})
            await steps.get()
        await send({"type": "http.response.body", "body": b"end\n"})
    elif path == "/step":
        assert steps is not None
        steps.put_nowait(None)
        await respond(send, 200, b"stepped")
    elif path == "/until-disconnect":
        await read_body(receive)
        await start_stream(send)
        while (await receive())["type"] != "http.disconnect":
            pass
        await receive()
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"too late\n", "more_body": True})
    elif path == "/concurrent-receive":
        await read_body(receive)
        await start_stream(send)
        watcher = asyncio.ensure_future(receive())
        impatient = asyncio.ensure_future(receive())
        await asyncio.sleep(0)
        impatient.cancel()
        message = await watcher
        assert message["type"] == "http.disconnect", message
    elif path == "/runtime-keys":
        # Message keys built at run time (not the interned literals), and one no server knows.
        built = "".join
        start = {built(["ty", "pe"]): "http.response.start", built(["sta", "tus"]): 201, "x-unknown": 1}
        start[built(["head", "ers"])] = [(b"content-type", b"text/plain")]
        await send(start)
        await send({built(["ty", "pe"]): "http.response.body", built(["bo", "dy"]): b"one ", "more_body": True})
        await send({"type": built(["http.response.", "body"]), "body": b"two", built(["more_", "body"]): False})
    elif path == "/cancel-own-task":
        asyncio.current_task().cancel()
        await respond(send, 200, b"cancelled its own task")
    elif path == "/cancel-own-task-and-wait":
        asyncio.current_task().cancel()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            await respond(send, 200, b"cancelled while waiting")
    elif path == "/asgi-dict":
        keys = ",".join(sorted(scope["asgi"]))
        if scope["query_string"] == b"undo":
            # So that the other tests of a shared server see the usual scope.
            scope["asgi"].pop("added-by-an-earlier-request", None)
        else:
            scope["asgi"]["added-by-an-earlier-request"] = True
        await respond(send, 200, keys.encode())
    elif path == "/yield-once":
        await asyncio.sleep(0)
        await respond(send, 200, b"resumed")
    else:
        await respond(send, 404, b"not found")


async def failing(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(scope, receive, send, fail=True)
        return
    await respond(send, 200, b"should not run")


# The same app under other names, so that several pairs of one test module record into files of
# their own (test_diff_tls_logs.py).
combined_pem = app
encrypted_pem = app
