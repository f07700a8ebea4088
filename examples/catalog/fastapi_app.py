"""The catalog as a FastAPI app, for uvicorn: ``uvicorn examples.catalog.fastapi_app:app``.

The endpoint is ``async def``. With PostgreSQL it awaits psycopg's async pool;
SQLite and MariaDB (PyMySQL) are blocking drivers, so their queries run in
Starlette's thread pool (each thread with its own connection, see db.py).

Its cache is what a FastAPI user typically adds: an in-process TTL cache
(cachetools' ``TTLCache``, 600 s, bounded by entry count) in front of the
catalog, keyed on the parameters that decide the answer and on the base URL
(so the Host is in the key, unlike spkrepo's). It has no single flight: misses
that arrive together all query the database. ``CATALOG_CACHE=0`` turns it off.
The SQL and the bytes are those of the other front ends (catalog.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachetools import TTLCache
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from examples.catalog import settings
from examples.catalog.catalog import Catalog, Rejection, Selection, encode, reject, run, run_async
from examples.catalog.db import STATS, connect

app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
catalog = Catalog()
database = connect(settings.database_url(), asynchronous=True)
answers: TTLCache[tuple[Selection, str], bytes] | None = (
    TTLCache(maxsize=10_000, ttl=600) if settings.cache_enabled() else None
)


async def steps_result(steps: Any) -> Any:
    if database.is_async:
        return await run_async(steps, database.fetch)
    return await run_in_threadpool(run, steps, database.fetch)


async def answer(values: Mapping[str, str], request: Request) -> Response:
    selection = await steps_result(catalog.select(values))
    if isinstance(selection, Rejection):
        status, body, content_type = reject(selection)
        return Response(body, status_code=status, media_type=content_type)
    base_url = f"{request.url.scheme}://{request.headers.get('host') or 'localhost'}"
    key = (selection, base_url)
    body = answers.get(key) if answers is not None else None
    if body is None:
        body = encode(await steps_result(catalog.document(selection, base_url)))
        if answers is not None:
            answers[key] = body
    return Response(body, media_type="application/json")


def query_values(request: Request) -> dict[str, str]:
    """The first value of each parameter, as spkrepo (Werkzeug) reads them; Starlette's own
    mapping would give the last."""
    values: dict[str, str] = {}
    for name, value in request.query_params.multi_items():
        values.setdefault(name, value)
    return values


@app.get("/nas/")
async def nas_get(request: Request) -> Response:
    return await answer(query_values(request), request)


@app.post("/nas/")
async def nas_post(request: Request) -> Response:
    values = query_values(request)
    for name, value in (await request.form()).multi_items():
        if isinstance(value, str):
            values.setdefault(name, value)
    return await answer(values, request)


if settings.admin_enabled():

    @app.get("/_catalog/stats")
    async def stats() -> JSONResponse:
        return JSONResponse(STATS.snapshot())

    @app.post("/_catalog/invalidate")
    async def invalidate() -> PlainTextResponse:
        if answers is not None:
            answers.clear()
        catalog.invalidate()
        settings.invalidate_rush_cache()
        return PlainTextResponse("invalidated\n")
