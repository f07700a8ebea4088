"""The catalog's Flask twin: spkrepo's own stack (Flask, Flask-SQLAlchemy, Flask-Caching).

Runs under gunicorn (``gunicorn examples.catalog.flask_app:app``, the seed's
spkrepo row) or under rush's WSGI (``rush examples.catalog.flask_app:app``,
optionally with rush's native cache in front: ``--cache "/nas/:ttl=600,..."``).
It sends the same SQL as the other front ends (examples/catalog/catalog.py),
through SQLAlchemy's session, and answers the same bytes.

Flask-Caching is configured as spkrepo configures it: the catalog function is
memoized for 600 s on (arch, build, major, language, beta), in a per-process
``SimpleCache`` (the seed's ``CACHE_TYPE="simple"``; spkrepo's production
uses Redis, which ``CATALOG_REDIS`` selects: ``RedisCache`` shared by the
workers). The memoized key does not contain the Host, while the answer's
URLs do: like spkrepo, the first client's Host is served to everyone until the
entry expires (issue 12 describes the bug; tests/test_catalog.py shows it).
``CATALOG_CACHE=0`` swaps in ``NullCache`` (nothing cached: the cold runs, and
the runs where rush's cache sits in front).
"""

from __future__ import annotations

import time
from typing import Any

from flask import Flask, Response, abort, request
from flask_caching import Cache
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy import text

from examples.catalog import settings
from examples.catalog.catalog import Catalog, Rejection, Selection, encode, reject, run
from examples.catalog.db import STATS, Row, parse_url

app = Flask(__name__)
app.config.update(
    SQLALCHEMY_DATABASE_URI=parse_url(settings.database_url()).sqlalchemy_url(),
    SQLALCHEMY_TRACK_MODIFICATIONS=False,
    CACHE_TYPE=("RedisCache" if settings.shared_cache_url() else "SimpleCache")
    if settings.cache_enabled()
    else "NullCache",
    CACHE_REDIS_URL=settings.shared_cache_url(),
    CACHE_DEFAULT_TIMEOUT=600,
    # SimpleCache prunes beyond 500 entries by default; spkrepo's Redis has no such bound, and the
    # benchmark's 500 keys would otherwise keep evicting each other.
    CACHE_THRESHOLD=100_000,
    CACHE_NO_NULL_WARNING=True,
)
db = SQLAlchemy(app)
cache = Cache(app)
catalog = Catalog()


def fetch(sql: str, params: dict[str, Any]) -> list[Row]:
    """One query through the request's SQLAlchemy session, counted like every other front end's."""
    started = time.perf_counter()
    rows = [tuple(row) for row in db.session.execute(text(sql), params).all()]
    STATS.add_query(time.perf_counter() - started)
    return rows


@cache.memoize(timeout=600)
def get_catalog(arch: str, build: int, major: int | None, language: str, beta: bool) -> Any:
    selection = Selection(arch, build, major, language, beta)
    return run(catalog.document(selection, f"{request.scheme}://{request.host}"), fetch)


@app.route("/nas/", methods=["GET", "POST"])
def nas() -> Response:
    selection = run(catalog.select(request.values), fetch)
    if isinstance(selection, Rejection):
        status, body, content_type = reject(selection)
        abort(Response(body, status=status, content_type=content_type))
    document = get_catalog(selection.arch, selection.build, selection.major, selection.language, selection.beta)
    return Response(encode(document), mimetype="application/json")


if settings.admin_enabled():

    @app.get("/_catalog/stats")
    def stats() -> dict[str, float]:
        return STATS.snapshot()

    @app.post("/_catalog/invalidate")
    def invalidate() -> str:
        # What spkrepo's clear_catalog_cache does, plus the reference tables and, under rush with
        # --cache, rush's cached answers.
        cache.delete_memoized(get_catalog)
        catalog.invalidate()
        settings.invalidate_rush_cache()
        return "invalidated\n"
