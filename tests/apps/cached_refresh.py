"""Cached routes whose handler a test can hold, for the detached refresh of
stale answers (tests/test_cache_values.py), in each interface that can be
cached: the rush App (a sync handler, which holds the loop, and an async
one), WSGI (``wsgi_app``, on the loop or the ``--threads`` pool) and a raw
ASGI app (``asgi_app``).

``/held?dir=D`` answers ``version V``, V read from the file ``D/version``;
while ``D/hold`` exists the handler waits (up to a guard) before reading
it. Version ``1`` is answered with ``max-age=0`` (stale at once, within
``stale=600``), any other with ``max-age=600``; version ``fail`` is a 500.
``/calls`` counts the handler's calls.

The WSGI and ASGI apps get their cache from ``--cache`` (``CACHE_FLAGS``);
the App from ``Cache(...)`` on its routes.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from rush import App, Cache, Request, Response

CACHE_FLAGS = ["--cache", "/held:ttl=600,stale=600"]
HOLD_GUARD = 30.0

calls: Counter[str] = Counter()


def held(directory: Path) -> bool:
    return (directory / "hold").exists()


def answer(directory: Path) -> tuple[int, dict[str, str], str]:
    """Status, headers and body once the hold is gone."""
    version = (directory / "version").read_text()
    status = 500 if version == "fail" else 200
    max_age = 0 if version == "1" else 600
    return status, {"Cache-Control": f"max-age={max_age}"}, f"version {version}"


def wait_sync(directory: Path) -> None:
    deadline = time.monotonic() + HOLD_GUARD
    while held(directory) and time.monotonic() < deadline:
        time.sleep(0.01)


async def wait_async(directory: Path) -> None:
    deadline = time.monotonic() + HOLD_GUARD
    while held(directory) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


app = App()


@app.get("/held", cache=Cache(ttl=600, stale=600))
def held_sync(request: Request) -> Response:
    calls["held"] += 1
    directory = Path(request.query["dir"])
    wait_sync(directory)
    status, headers, body = answer(directory)
    return Response(body, status=status, headers=headers)


async_app = App()


@async_app.get("/held", cache=Cache(ttl=600, stale=600))
async def held_async(request: Request) -> Response:
    calls["held"] += 1
    directory = Path(request.query["dir"])
    await wait_async(directory)
    status, headers, body = answer(directory)
    return Response(body, status=status, headers=headers)


@app.get("/calls")
@async_app.get("/calls")
def get_calls(request: Request) -> dict[str, int]:
    return dict(calls)


def wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    if environ["PATH_INFO"] == "/calls":
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(dict(calls)).encode()]
    calls["held"] += 1
    directory = Path(parse_qs(environ["QUERY_STRING"])["dir"][0])
    wait_sync(directory)
    status, headers, body = answer(directory)
    reason = "OK" if status == 200 else "Internal Server Error"
    start_response(f"{status} {reason}", [("Content-Type", "text/plain"), *headers.items()])
    return [body.encode()]


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/calls":
        status, headers, body = 200, {"content-type": "application/json"}, json.dumps(dict(calls))
    else:
        calls["held"] += 1
        directory = Path(parse_qs(scope["query_string"].decode())["dir"][0])
        await wait_async(directory)
        status, headers, body = answer(directory)
    data = body.encode()
    fields = [(name.encode(), value.encode()) for name, value in headers.items()]
    fields.append((b"content-length", str(len(data)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": fields})
    await send({"type": "http.response.body", "body": data})
