"""A rush App whose cached route has a shared second level in Redis
(tests/test_cache_shared.py): the URL comes from ``CACHE_TEST_REDIS``.
``/item?id=N`` is cached per ``id``; ``/calls`` counts handler calls;
``/invalidate`` drops the route (here, and in Redis)."""

from __future__ import annotations

import os
from collections import Counter

from rush import App, Cache, Request

app = App()
calls: Counter[str] = Counter()


@app.get("/item", cache=Cache(ttl=600, vary_query=["id"], shared=os.environ["CACHE_TEST_REDIS"]))
def item(request: Request) -> dict[str, object]:
    calls["item"] += 1
    return {"id": request.query.get("id"), "served_by": os.getpid()}


@app.get("/calls")
def get_calls(request: Request) -> dict[str, int]:
    return dict(calls)


@app.get("/invalidate")
def invalidate(request: Request) -> str:
    app.cache.invalidate("/item")
    return "invalidated"


@app.get("/clear")
def clear(request: Request) -> str:
    app.cache.clear()
    return "cleared"


# Another app on the same Redis, with a route of the same pattern and key:
# its own namespace (its import string) keeps the two apart.
other = App()


@other.get("/item", cache=Cache(ttl=600, vary_query=["id"], shared=os.environ["CACHE_TEST_REDIS"]))
def other_item(request: Request) -> dict[str, object]:
    calls["item"] += 1
    return {"id": request.query.get("id"), "app": "other"}


@other.get("/calls")
def other_calls(request: Request) -> dict[str, int]:
    return dict(calls)


@other.get("/clear")
def other_clear(request: Request) -> str:
    other.cache.clear()
    return "cleared"
