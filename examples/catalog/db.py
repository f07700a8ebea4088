"""Database connections for the catalog: one small interface over sqlite3, psycopg 3 and PyMySQL.

`connect(url)` returns a `Database` whose ``fetch(sql, params)`` runs one query
and returns its rows as tuples. The SQL is written once, with ``:name``
parameters (sqlite3's and SQLAlchemy's style); the PostgreSQL and MariaDB
classes rewrite it once per statement to their drivers' ``%(name)s`` style and
keep the result. Every `fetch` is counted in `STATS` (queries and the time
spent in the database), which the front ends expose when ``CATALOG_ADMIN=1``:
that is how the tests and the benchmark count database queries.

URLs: ``sqlite:///path`` (or a bare path; the default is
examples/catalog/catalog.sqlite3), ``postgresql://user@host:port/db`` and
``mysql://user@host:port/db`` (MariaDB). Connections are per thread (sqlite3
connections may not cross threads; FastAPI runs blocking calls in a thread
pool) and in autocommit mode, so each query sees the latest committed data
instead of a snapshot held open since the connection's first query.
`AsyncPostgres` is the pool for async handlers (psycopg_pool).

Drivers are imported only when a URL needs them, so SQLite needs nothing
outside the standard library.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

HERE = Path(__file__).resolve().parent
DEFAULT_SQLITE = HERE / "catalog.sqlite3"
SCHEMA = HERE / "schema.sql"

Row = tuple[Any, ...]


@dataclass
class Stats:
    """What the catalog cost this process: database queries and time, catalogs built and the time
    spent turning rows into Python data (build), and data into JSON bytes (encode). Updated under
    a lock (thread pools call in parallel)."""

    queries: int = 0
    db_seconds: float = 0.0
    catalogs: int = 0
    build_seconds: float = 0.0
    encodes: int = 0
    encode_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add_query(self, seconds: float) -> None:
        with self.lock:
            self.queries += 1
            self.db_seconds += seconds

    def add_catalog(self, seconds: float) -> None:
        with self.lock:
            self.catalogs += 1
            self.build_seconds += seconds

    def add_encode(self, seconds: float) -> None:
        with self.lock:
            self.encodes += 1
            self.encode_seconds += seconds

    def snapshot(self) -> dict[str, float]:
        with self.lock:
            return {
                "queries": self.queries,
                "db_seconds": round(self.db_seconds, 6),
                "catalogs": self.catalogs,
                "build_seconds": round(self.build_seconds, 6),
                "encodes": self.encodes,
                "encode_seconds": round(self.encode_seconds, 6),
            }


STATS = Stats()

_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def pyformat(sql: str) -> str:
    """``:name`` parameters as ``%(name)s`` (psycopg, PyMySQL). The SQL has no literal ``%``."""
    if "%" in sql:
        raise ValueError("catalog SQL must not contain a literal %: pass patterns as parameters")
    return _NAMED.sub(r"%(\1)s", sql)


def statements(script: str) -> list[str]:
    """The statements of a DDL script: comments dropped, split on a semicolon that ends a line."""
    lines = [line for line in script.splitlines() if not line.lstrip().startswith("--")]
    return [part.strip() for part in re.split(r";\s*$", "\n".join(lines), flags=re.MULTILINE) if part.strip()]


@dataclass(frozen=True)
class Target:
    """A parsed database URL."""

    dialect: str  # "sqlite", "postgresql" or "mysql"
    url: str
    path: str = ""
    host: str = "127.0.0.1"
    port: int | None = None
    user: str = ""
    password: str = ""
    database: str = ""
    unix_socket: str = ""

    def sqlalchemy_url(self) -> str:
        """The same database as SQLAlchemy names it (with the driver this example uses)."""
        if self.dialect == "sqlite":
            return f"sqlite:///{self.path}"
        scheme = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql"}[self.dialect]
        credentials = self.user + (f":{self.password}" if self.password else "")
        port = f":{self.port}" if self.port else ""
        return f"{scheme}://{credentials}@{self.host}{port}/{self.database}"


def parse_url(url: str | None) -> Target:
    if not url:
        return Target("sqlite", f"sqlite:///{DEFAULT_SQLITE}", path=str(DEFAULT_SQLITE))
    if "://" not in url:
        return Target("sqlite", f"sqlite:///{url}", path=url)
    parts = urlsplit(url)
    scheme = parts.scheme.split("+")[0]
    if scheme == "sqlite":
        # sqlite:///relative/or/absolute: everything after the third slash is the path, as SQLAlchemy reads it.
        path = url.split(":///", 1)[1] if ":///" in url else parts.path
        return Target("sqlite", url, path=path)
    dialect = {"postgresql": "postgresql", "postgres": "postgresql", "mysql": "mysql", "mariadb": "mysql"}.get(scheme)
    if dialect is None:
        raise ValueError(f"unsupported database URL {url!r}: sqlite:///PATH, postgresql://... or mysql://...")
    return Target(
        dialect,
        url,
        host=parts.hostname or "127.0.0.1",
        port=parts.port,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=parts.path.lstrip("/"),
    )


class Database:
    """A blocking connection per thread; subclasses open it and say how parameters are written."""

    dialect = ""
    is_async = False

    def __init__(self, target: Target) -> None:
        self.target = target
        self._local = threading.local()
        self._converted: dict[str, str] = {}

    def _open(self) -> Any:
        raise NotImplementedError

    def _sql(self, sql: str) -> str:
        return sql

    def connection(self) -> Any:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = self._open()
        return connection

    def fetch(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        """Runs one query (counted in STATS) and returns its rows."""
        converted = self._converted.get(sql)
        if converted is None:
            converted = self._converted[sql] = self._sql(sql)
        started = time.perf_counter()
        cursor = self.connection().cursor()
        try:
            cursor.execute(converted, dict(params or {}))
            rows = [tuple(row) for row in cursor.fetchall()]
        finally:
            cursor.close()
        STATS.add_query(time.perf_counter() - started)
        return rows

    def execute_script(self, script: str) -> None:
        """Runs a DDL script statement by statement (not counted: set-up, not serving)."""
        connection = self.connection()
        cursor = connection.cursor()
        for statement in statements(script):
            cursor.execute(statement)
        cursor.close()

    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        """Bulk insert (not counted). One transaction per table, for speed on every engine."""
        rows = list(rows)
        if not rows:
            return
        names = ", ".join(columns)
        sql = self._sql(f"INSERT INTO {table} ({names}) VALUES ({', '.join(':' + c for c in columns)})")
        connection = self.connection()
        cursor = connection.cursor()
        self._begin(cursor)
        cursor.executemany(sql, [dict(zip(columns, row, strict=True)) for row in rows])
        self._commit(cursor)
        cursor.close()

    def _begin(self, cursor: Any) -> None:
        cursor.execute("BEGIN")

    def _commit(self, cursor: Any) -> None:
        cursor.execute("COMMIT")

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None


class SQLite(Database):
    dialect = "sqlite"

    def _open(self) -> Any:
        import sqlite3

        # isolation_level=None: autocommit, transactions only where insert() opens one.
        connection = sqlite3.connect(self.target.path, isolation_level=None)
        connection.execute("PRAGMA foreign_keys = ON")
        return connection


class Postgres(Database):
    dialect = "postgresql"

    def _open(self) -> Any:
        import psycopg

        return psycopg.connect(**postgres_arguments(self.target), autocommit=True)

    def _sql(self, sql: str) -> str:
        return pyformat(sql)


class MariaDB(Database):
    dialect = "mysql"

    def _open(self) -> Any:
        import pymysql

        return pymysql.connect(**mysql_arguments(self.target), autocommit=True)

    def _sql(self, sql: str) -> str:
        return pyformat(sql)

    def _begin(self, cursor: Any) -> None:
        cursor.execute("START TRANSACTION")


def postgres_arguments(target: Target) -> dict[str, Any]:
    arguments: dict[str, Any] = {"host": target.host, "user": target.user, "dbname": target.database}
    if target.port:
        arguments["port"] = target.port
    if target.password:
        arguments["password"] = target.password
    return arguments


def mysql_arguments(target: Target) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "host": target.host,
        "user": target.user,
        "database": target.database,
        "charset": "utf8mb4",
    }
    if target.port:
        arguments["port"] = target.port
    if target.password:
        arguments["password"] = target.password
    return arguments


class AsyncPostgres:
    """psycopg's async connection pool, for handlers that are ``async def``: a query waits for
    PostgreSQL without blocking the event loop. Opened on first use, inside the running loop."""

    dialect = "postgresql"
    is_async = True

    def __init__(self, target: Target, max_size: int = 4) -> None:
        self.target = target
        self.max_size = max_size
        self._pool: Any = None
        self._converted: dict[str, str] = {}

    async def _get_pool(self) -> Any:
        if self._pool is None:
            from psycopg_pool import AsyncConnectionPool

            # Built and opened in one go (no await between the check and the assignment), so
            # concurrent first requests share one pool.
            pool = AsyncConnectionPool(
                kwargs={**postgres_arguments(self.target), "autocommit": True},
                min_size=1,
                max_size=self.max_size,
                open=False,
            )
            self._pool = pool
            await pool.open()
        return self._pool

    async def fetch(self, sql: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        converted = self._converted.get(sql)
        if converted is None:
            converted = self._converted[sql] = pyformat(sql)
        pool = await self._get_pool()
        started = time.perf_counter()
        async with pool.connection() as connection:
            cursor = await connection.execute(converted, dict(params or {}))
            rows = [tuple(row) for row in await cursor.fetchall()]
        STATS.add_query(time.perf_counter() - started)
        return rows


def connect(url: str | None, asynchronous: bool = False) -> Database | AsyncPostgres:
    """The database at ``url``: blocking, or for PostgreSQL with ``asynchronous`` the async pool."""
    target = parse_url(url)
    if target.dialect == "sqlite":
        return SQLite(target)
    if target.dialect == "postgresql":
        return AsyncPostgres(target) if asynchronous else Postgres(target)
    return MariaDB(target)
