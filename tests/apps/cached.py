"""A rush App with cached routes (tests/test_cache.py). Each handler counts
its calls in this worker, so a test can tell a cached answer from a new one.

* ``/nas/`` caches for 600 s on ``arch`` and ``build`` and the Host;
* ``/short`` caches for 0.2 s (expiry);
* ``/cookie`` sets a cookie, ``/private`` says ``Cache-Control: private``,
  ``/missing`` answers 404: none is stored;
* ``/async`` is an ``async def`` handler that answers in its first step;
* ``/big`` caches a 100 KiB body (sent from the shared stored bytes);
* ``/many?key=K`` caches per key, for the memory bound;
* ``/flaky`` answers with ``max-age=0`` (stale at once, within
  ``stale=600``) and raises once ``/flaky-fail`` was called;
* ``/pid`` caches its worker's PID and call count (invalidation across
  workers);
* ``/calls`` the call counts, ``/stats`` the cache's, ``/clear`` and
  ``/invalidate?pattern=P[&name=value...]`` drop entries.
"""

from __future__ import annotations

import os
from collections import Counter

from rush import App, Cache, Request, Response

# The whole cache of the worker is bounded to this (the test of the bound).
BOUND = "1M"

app = App()
calls: Counter[str] = Counter()


@app.get("/nas/", cache=Cache(ttl=600, vary_query=["arch", "build"], vary_headers=["host"], max_bytes=BOUND))
def nas(request: Request) -> dict[str, object]:
    calls["nas"] += 1
    return {"arch": request.query.get("arch"), "host": request.headers.get("host"), "call": calls["nas"]}


@app.get("/short", cache=Cache(ttl=0.2, max_bytes=BOUND))
def short(request: Request) -> str:
    calls["short"] += 1
    return f"call {calls['short']}"


@app.get("/cookie", cache=Cache(ttl=600, max_bytes=BOUND))
def cookie(request: Request) -> Response:
    calls["cookie"] += 1
    return Response("cookie", headers={"Set-Cookie": "a=b"})


@app.get("/private", cache=Cache(ttl=600, max_bytes=BOUND))
def private(request: Request) -> Response:
    calls["private"] += 1
    return Response("private", headers={"Cache-Control": "private"})


@app.get("/missing", cache=Cache(ttl=600, max_bytes=BOUND))
def missing(request: Request) -> Response:
    calls["missing"] += 1
    return Response("nope", status=404)


@app.get("/async", cache=Cache(ttl=600, max_bytes=BOUND))
async def cached_async(request: Request) -> str:
    calls["async"] += 1
    return "async"


@app.get("/big", cache=Cache(ttl=600, max_bytes=BOUND))
def big(request: Request) -> bytes:
    calls["big"] += 1
    return b"b" * (100 * 1024)


@app.get("/many", cache=Cache(ttl=600, vary_query=["key"], max_bytes=BOUND))
def many(request: Request) -> bytes:
    calls["many"] += 1
    return b"m" * 1000


failing = False


@app.get("/flaky", cache=Cache(ttl=600, stale=600, max_bytes=BOUND))
def flaky(request: Request) -> Response:
    calls["flaky"] += 1
    if failing:
        raise RuntimeError("the refresh fails")
    return Response(f"flaky {calls['flaky']}", headers={"Cache-Control": "max-age=0"})


@app.get("/flaky-fail")
def flaky_fail(request: Request) -> str:
    global failing
    failing = True
    return "failing"


@app.get("/pid", cache=Cache(ttl=600, max_bytes=BOUND))
def pid(request: Request) -> dict[str, int]:
    calls["pid"] += 1
    return {"pid": os.getpid(), "call": calls["pid"]}


@app.get("/calls")
def get_calls(request: Request) -> dict[str, int]:
    return dict(calls)


@app.get("/stats")
def stats(request: Request) -> dict[str, int]:
    return app.cache.stats()


@app.get("/clear")
def clear(request: Request) -> str:
    app.cache.clear()
    return "cleared"


@app.get("/invalidate")
def invalidate(request: Request) -> str:
    query = {name: request.query.getlist(name) for name in request.query if name != "pattern"}
    app.cache.invalidate(request.query["pattern"], **query)
    return "invalidated"
