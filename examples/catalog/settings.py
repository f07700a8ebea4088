"""The catalog's settings, read from the environment by every front end.

* ``CATALOG_DB``: the database URL (``sqlite:///PATH``, ``postgresql://...``,
  ``mysql://...``); default examples/catalog/catalog.sqlite3, which is built
  from the generator on first use when it does not exist yet.
* ``CATALOG_CACHE``: ``0`` turns the front end's cache off (cold benchmarks);
  anything else, or unset, leaves it on.
* ``CATALOG_ASYNC``: ``1`` makes the rush App's handlers ``async def`` on
  psycopg's async pool when the database is PostgreSQL; by default they are
  blocking like the SQLite and MariaDB ones. rush's cache does not yet store
  the answer of an async handler that really suspends (awaits a query), so
  the async handlers would miss every time (tests/test_catalog.py marks it).
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


def async_handlers() -> bool:
    return os.environ.get("CATALOG_ASYNC", "0") == "1"


def admin_enabled() -> bool:
    return os.environ.get("CATALOG_ADMIN", "0") == "1"
