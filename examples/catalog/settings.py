"""The catalog's settings, read from the environment by every front end.

* ``CATALOG_DB``: the database URL (``sqlite:///PATH``, ``postgresql://...``,
  ``mysql://...``); default examples/catalog/catalog.sqlite3, which is built
  from the generator on first use when it does not exist yet.
* ``CATALOG_CACHE``: ``0`` turns the front end's cache off (cold benchmarks);
  anything else, or unset, leaves it on.
* ``CATALOG_ASYNC``: with a PostgreSQL URL, the rush App's handlers are
  ``async def`` on psycopg's async pool (a query in flight does not block the
  worker's loop); ``0`` makes them blocking, like the SQLite and MariaDB ones.
* ``CATALOG_REDIS``: a ``redis://`` URL adds a level shared by the workers
  behind each front end's own cache (the rush App's ``Cache(shared=...)``;
  the Flask twin's Flask-Caching ``RedisCache``, spkrepo's production set-up).
  Unset: no shared level.
* ``CATALOG_ADMIN``: ``1`` adds ``GET /_catalog/stats`` (this process's query
  counter, see db.STATS) and ``POST /_catalog/invalidate`` (drops the cached
  answers and the reference tables). Off by default: a public catalog must not
  let anyone empty its cache.
"""

from __future__ import annotations

import os
from pathlib import Path

from examples.catalog.db import parse_url


def database_url() -> str | None:
    """CATALOG_DB, after building the default (or named) SQLite file if it is missing."""
    url = os.environ.get("CATALOG_DB") or None
    target = parse_url(url)
    if target.dialect == "sqlite" and not Path(target.path).exists():
        build_sqlite(Path(target.path))
    return url


def build_sqlite(path: Path) -> None:
    """Builds the SQLite database aside and renames it into place, so several workers starting at
    once never open a half-written file (the last rename wins; the files are identical)."""
    from examples.catalog import data

    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    data.build(str(partial))
    partial.replace(path)


def cache_enabled() -> bool:
    return os.environ.get("CATALOG_CACHE", "1") != "0"


def shared_cache_url() -> str | None:
    return os.environ.get("CATALOG_REDIS") or None


def async_handlers() -> bool:
    return os.environ.get("CATALOG_ASYNC", "1") != "0"


def admin_enabled() -> bool:
    return os.environ.get("CATALOG_ADMIN", "0") == "1"


def invalidate_rush_cache(path: str = "/nas/") -> None:
    """Drops rush's native cached answers of ``path`` in every worker, when this app runs under
    rush with ``--cache`` (the Flask and FastAPI front ends); nothing under another server."""
    try:
        from rush.cache import worker_cache
    except ImportError:
        return
    worker_cache.invalidate(path)
