"""The catalog as a rush App: ``rush examples.catalog.rush_app:app`` (``make catalog``).

``GET /nas/`` is cached natively by rush for 600 s, keyed on the parameters
that decide the answer (examples.catalog.catalog.VARY_QUERY) and on the Host,
which the answer's absolute URLs embed: a hit is answered in Rust without
calling the handler or the database. ``POST /nas/`` (DSM may post a form)
answers the same, uncached. With ``CATALOG_CACHE=0`` nothing is cached (the
cold benchmarks). With ``CATALOG_REDIS`` the cache has a second level in Redis
shared by the workers (namespace ``catalog``): a worker that misses asks Redis
before the database. Settings: examples/catalog/settings.py.

With a PostgreSQL URL the handlers are ``async def`` on psycopg's async pool,
so a query in flight does not block the worker's loop (``CATALOG_ASYNC=0``
makes them blocking); SQLite and MariaDB (PyMySQL) are blocking drivers, so
their handlers are plain functions. rush speaks plain HTTP here, so the URLs'
scheme is ``http`` (rush's Request does not say the scheme; see README.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from rush import App, Cache, Request, Response

from examples.catalog import settings
from examples.catalog.catalog import VARY_QUERY, Catalog, form_values, run, run_async
from examples.catalog.db import STATS, connect

app = App()
catalog = Catalog()
database = connect(settings.database_url(), asynchronous=settings.async_handlers())
# stale=30: an expired answer is still served for 30 s while one request refreshes it, so a key's
# expiry never makes its clients wait for the database (and a failing refresh keeps it served).
cache = (
    Cache(
        ttl=600,
        vary_query=list(VARY_QUERY),
        vary_headers=["host"],
        stale=30,
        shared=settings.shared_cache_url(),
        namespace="catalog",
    )
    if settings.cache_enabled()
    else None
)


def base_url(request: Request) -> str:
    return f"http://{request.headers.get('host') or 'localhost'}"


def post_values(request: Request) -> dict[str, str]:
    return form_values(request.query, request.headers.get("content-type"), request.body)


def respond(result: tuple[int, bytes, str]) -> Response:
    status, body, content_type = result
    return Response(body, status=status, content_type=content_type)


if database.is_async:

    async def answer(values: Mapping[str, str], request: Request) -> Response:
        return respond(await run_async(catalog.answer(values, base_url(request)), database.fetch))

    @app.get("/nas/", cache=cache)
    async def nas_get(request: Request) -> Response:
        return await answer(request.query, request)

    @app.post("/nas/")
    async def nas_post(request: Request) -> Response:
        return await answer(post_values(request), request)

else:

    def answer_blocking(values: Mapping[str, str], request: Request) -> Response:
        return respond(run(catalog.answer(values, base_url(request)), database.fetch))

    @app.get("/nas/", cache=cache)
    def nas_get(request: Request) -> Response:
        return answer_blocking(request.query, request)

    @app.post("/nas/")
    def nas_post(request: Request) -> Response:
        return answer_blocking(post_values(request), request)


if settings.admin_enabled():

    @app.get("/_catalog/stats")
    def stats(request: Request) -> dict[str, float]:
        return STATS.snapshot()

    @app.post("/_catalog/invalidate")
    def invalidate(request: Request) -> str:
        # rush drops the cached answers in every worker; the reference tables are this process's
        # (the other workers reload theirs within REFERENCE_TTL).
        app.cache.invalidate("/nas/")
        catalog.invalidate()
        return "invalidated\n"
