"""Cached routes whose handlers wait at a gate the test opens, in three
interfaces (tests/test_cache_flight.py): the rush App (``async def``), a
WSGI app run on a thread pool, and a raw ASGI app.

Every app answers:
* ``/slow?k=K``: cached per ``k``; the handler counts its call, then waits
  until the gate is open (concurrent misses must call it once);
* ``/swr``: answers with ``max-age=0`` (stale at once, ``stale=600``) after
  waiting at the gate (stale answers are served while it refreshes);
* ``/locked``: like ``/slow``, with a lock timeout of 0.5 s (waiting
  requests then go to the handler themselves);
* ``/gate/close``, ``/gate/open``; ``/calls``; ``/stats`` (the worker's
  cache counters).

The WSGI and ASGI apps get their cache from ``--cache`` flags (see
``CACHE_FLAGS``); the App from ``Cache(...)`` on its routes.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from typing import Any

from rush import App, Cache, Request, Response
from rush.cache import worker_cache

CACHE_FLAGS = [
    *("--cache", "/slow:ttl=600,vary_query=k"),
    *("--cache", "/swr:ttl=600,stale=600"),
    *("--cache", "/locked:ttl=600,lock_timeout=0.5"),
]

calls: Counter[str] = Counter()


class AsyncGate:
    """Open by default; made in the worker's running loop on first use."""

    def __init__(self) -> None:
        self._event: asyncio.Event | None = None

    @property
    def event(self) -> asyncio.Event:
        if self._event is None:
            self._event = asyncio.Event()
            self._event.set()
        return self._event


gate = AsyncGate()
app = App()


@app.get("/slow", cache=Cache(ttl=600, vary_query=["k"]))
async def slow(request: Request) -> str:
    calls["slow"] += 1
    await gate.event.wait()
    return f"slow {request.query.get('k')} call {calls['slow']}"


@app.get("/locked", cache=Cache(ttl=600, lock_timeout=0.5))
async def locked(request: Request) -> str:
    calls["locked"] += 1
    await gate.event.wait()
    return f"locked call {calls['locked']}"


@app.get("/swr", cache=Cache(ttl=600, stale=600))
async def swr(request: Request) -> Response:
    calls["swr"] += 1
    await gate.event.wait()
    return Response(f"swr {calls['swr']}", headers={"Cache-Control": "max-age=0"})


@app.get("/gate/close")
async def close_gate(request: Request) -> str:
    gate.event.clear()
    return "closed"


@app.get("/gate/open")
async def open_gate(request: Request) -> str:
    gate.event.set()
    return "open"


@app.get("/calls")
def get_calls(request: Request) -> dict[str, int]:
    return dict(calls)


@app.get("/stats")
def stats(request: Request) -> dict[str, int]:
    return app.cache.stats()


# The WSGI twin, for --threads N: its handlers block a pool thread.
thread_gate = threading.Event()
thread_gate.set()


def wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    path = environ["PATH_INFO"]
    headers = [("Content-Type", "text/plain")]
    if path in ("/slow", "/locked"):
        name = path.strip("/")
        calls[name] += 1
        thread_gate.wait()
        body = f"{name} {environ['QUERY_STRING']} call {calls[name]}"
    elif path == "/swr":
        calls["swr"] += 1
        thread_gate.wait()
        body = f"swr {calls['swr']}"
        headers.append(("Cache-Control", "max-age=0"))
    elif path == "/gate/close":
        thread_gate.clear()
        body = "closed"
    elif path == "/gate/open":
        thread_gate.set()
        body = "open"
    elif path in ("/calls", "/stats"):
        body = json.dumps(dict(calls) if path == "/calls" else worker_cache.stats())
        headers = [("Content-Type", "application/json")]
    else:
        start_response("404 Not Found", headers)
        return [b"not found"]
    start_response("200 OK", headers)
    return [body.encode()]


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    headers = [(b"content-type", b"text/plain")]
    if path in ("/slow", "/locked"):
        name = path.strip("/")
        calls[name] += 1
        await gate.event.wait()
        body = f"{name} {scope['query_string'].decode()} call {calls[name]}"
    elif path == "/swr":
        calls["swr"] += 1
        await gate.event.wait()
        body = f"swr {calls['swr']}"
        headers.append((b"cache-control", b"max-age=0"))
    elif path == "/gate/close":
        gate.event.clear()
        body = "closed"
    elif path == "/gate/open":
        gate.event.set()
        body = "open"
    elif path in ("/calls", "/stats"):
        body = json.dumps(dict(calls) if path == "/calls" else worker_cache.stats())
    else:
        body = "not found"
    # Sent in two parts after a suspension: the cache records what is written.
    # (With its length, as Starlette sends it: a chunked answer is not stored.)
    headers.append((b"content-length", str(len(body.encode())).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await asyncio.sleep(0)
    await send({"type": "http.response.body", "body": body.encode()})
