"""The catalog group (seed 004): its key spread, its databases, its checks, and the misses count.

Seed 004 measured a Synology package catalog (spkrepo, ruspk, sspks) cold and
cached, with and without ``Connection: close``, on SQLite, PostgreSQL and
MariaDB. The catalog group reproduces that table with examples/catalog/: the
rush App with its native cache, the Flask twin under rush's WSGI with rush's
cache, the Flask twin with Flask-Caching under gunicorn (spkrepo's set-up), and
the FastAPI app under uvicorn; plus the same bytes as a static file (rush and
nginx), the ceiling that the bytes alone allow.

* **Spread**: warm runs ask ``SPREAD_SIZE`` distinct (arch, build, language)
  combinations, not one URL: ``write_paths`` writes them one per line and
  benches/lua/catalog.lua makes wrk cycle through them. `SPREAD` is computed
  from the generator's constants with a fixed seed, so it is the same
  everywhere. Every path is checked before timing (`shape_problems`: status,
  the answer's shape for its build, URLs on the Host wrk sends).
* **Databases** (`prepare`): a fresh SQLite file, and throwaway PostgreSQL and
  MariaDB servers (examples/catalog/dbservers.py) started for the run and
  stopped by PID at its end, pinned to the load generator's core so they never
  share the core of the server under test (their CPU is not in the server's
  CPU per request). Their URLs fill the ``{catalog_*}`` placeholders of the
  servers' commands. A database that cannot start drops its scenarios with a
  note.
* **Ceiling**: ``benches/.site/catalog-mean.json``, an answer of the spread
  padded with spaces to the spread's mean body size (still valid JSON).
* **Shared level** (``catalog-shared-sqlite``): two workers behind one Redis
  server, started by ``prepare`` like the databases (``{catalog_redis}``).
* **Misses** (``python -m benches.catalog misses``): 100 concurrent requests
  for one uncached key on each server, and how many database queries they cost
  (read from the example's query counter, ``CATALOG_ADMIN=1``).

Imports only the standard library at module level (the suite's rule);
the example's modules are imported where they are used.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from benches import BENCHES_DIR, REPO_ROOT

SITE = BENCHES_DIR / ".site"
SQLITE_PATH = SITE / "catalog.sqlite3"
PATHS_FILE = SITE / "catalog-paths.txt"
CEILING_FILE = SITE / "catalog-mean.json"
CEILING_PATH = "/static/catalog-mean.json"
LUA_SCRIPT = BENCHES_DIR / "lua" / "catalog.lua"
SPREAD_SIZE = 500
SPREAD_SEED = 4
DATABASES = ("sqlite", "postgresql", "mariadb")

# The database URLs the servers' commands get ({catalog_sqlite}, ...): set by `prepare`.
DATABASE_URLS: dict[str, str] = {
    "sqlite": f"sqlite:///{SQLITE_PATH}",
    "postgresql": "postgresql://catalog@127.0.0.1:0/not-started",
    "mariadb": "mysql://catalog@127.0.0.1:0/not-started",
    # The shared cache level of the two-worker rows (not a database: nothing is queried there).
    "redis": "redis://127.0.0.1:0/not-started",
}
# The apps of the shared-level rows: two workers, each front end's cache backed by one Redis.
SHARED_PREFIX = "catalog-shared-"
# rush's cache for a WSGI or ASGI app (the lead's --cache flag): the rush App's policy, as text.
RUSH_CACHE_FLAG = "/nas/:ttl=600,vary_query=arch|build|language|major|package_update_channel,vary_headers=host"


def placeholders() -> dict[str, str]:
    return {f"catalog_{kind}": url for kind, url in DATABASE_URLS.items()}


def spread(size: int = SPREAD_SIZE, seed: int = SPREAD_SEED) -> tuple[str, ...]:
    """``size`` distinct /nas/ paths as DSM sends them (major, minor and micro included, a beta
    channel now and then), over every architecture, DSM firmware and language of the generator."""
    from examples.catalog.data import ARCHITECTURES, FIRMWARE, LANGUAGES

    rng = random.Random(seed)
    # DSM reports the Synology name of its chip; spkrepo's 88f628x is asked as 88f6281 or 88f6282.
    arches = [code for code in ARCHITECTURES if code not in ("noarch", "88f628x")] + ["88f6281", "88f6282"]
    firmware = [(version, build) for version, build, kind in FIRMWARE if kind == "dsm"]
    languages = [code for code, _ in LANGUAGES]
    seen: set[tuple[str, int, str]] = set()
    paths = []
    while len(paths) < size:
        arch, (version, build), language = rng.choice(arches), rng.choice(firmware), rng.choice(languages)
        if (arch, build, language) in seen:
            continue
        seen.add((arch, build, language))
        major, minor = version.split(".")
        channel = "beta" if rng.random() < 0.3 else "stable"
        paths.append(
            f"/nas/?package_update_channel={channel}&build={build}&language={language}"
            f"&major={major}&micro={rng.randint(0, 4)}&arch={arch}&minor={minor}"
        )
    return tuple(paths)


SPREAD = spread()
# The key of the misses count: seed 004's own request (its arch x64 is spkrepo's x86_64), a full
# DSM 6.2 answer with the beta channel.
MISSES_PATH = "/nas/?package_update_channel=beta&build=24922&language=enu&major=6&micro=2&arch=x86_64&minor=2"


def write_paths(path: Path = PATHS_FILE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{line}\n" for line in SPREAD)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


def shape_problems(path: str, body: bytes, host: str) -> list[str]:
    """What is wrong with a catalog answer for ``path`` (empty when nothing): valid JSON, the
    shape its build asks for, a package list whose entries have spkrepo's keys and URLs on
    ``host`` (``host:port`` as sent)."""
    try:
        document = json.loads(body)
    except ValueError:
        return [f"body is not JSON: {body[:80]!r}"]
    query = parse_qs(urlsplit(path).query)
    if "build" not in query:
        # The ceiling file: an answer like any other, whatever its build.
        entries = document if isinstance(document, list) else document.get("packages")
        return [] if isinstance(entries, list) and entries else ["no package list"]
    build = int(query["build"][0])
    if build < 5004:
        if not isinstance(document, list):
            return [f"build {build}: expected a bare list"]
        entries = document
    else:
        keys = {"packages", "keyrings"} if build < 40000 else {"packages"}
        if not isinstance(document, dict) or set(document) != keys:
            return [f"build {build}: expected an object with {sorted(keys)}"]
        entries = document["packages"]
    problems = []
    for entry in entries[:5]:
        missing = {"package", "version", "dname", "desc", "link", "thumbnail"} - set(entry)
        if missing:
            problems.append(f"an entry without {sorted(missing)}")
        elif not entry["link"].startswith(f"http://{host}/nas/"):
            problems.append(f"link {entry['link'][:60]!r} is not on http://{host}/")
    return problems


def read_stats(host: str, port: int) -> dict[str, float] | None:
    """The catalog's counters (``CATALOG_ADMIN=1``), or None when the server does not expose them."""
    from benches.httpcheck import ResponseReader

    try:
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(f"GET /_catalog/stats HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            response = ResponseReader(sock).read_response()
    except OSError:
        return None
    if response.status != 200:
        return None
    try:
        return json.loads(response.body)
    except ValueError:
        return None


def per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """Where a window's time went, per request: queries, and ms in the database, building the
    document from rows and encoding it (the rest of the server CPU is the server and framework)."""
    if requests <= 0:
        return {}
    delta = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    return {
        "queries": delta["queries"] / requests,
        "db_ms": 1000 * delta["db_seconds"] / requests,
        "build_ms": 1000 * delta["build_seconds"] / requests,
        "encode_ms": 1000 * delta.get("encode_seconds", 0.0) / requests,
        # Answers encoded: on every request for a cache that keeps the document (Flask-Caching), on
        # misses only for caches that keep the bytes (rush's, the FastAPI app's).
        "encodes": delta.get("encodes", 0) / requests,
    }


@dataclass
class Prepared:
    """The databases started for a run, and the scenarios that can run."""

    scenarios: list[Any]
    notes: dict[str, str] = field(default_factory=dict)
    servers: list[Any] = field(default_factory=list)

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        self.servers.clear()


def counts_queries(app: str) -> bool:
    """Whether a run of ``app`` reads the query counter around its window: the counter is one
    process's, so not for the two-worker shared-level rows (it would show one worker's half)."""
    return app.startswith("catalog-") and not app.startswith(SHARED_PREFIX)


def scenario_database(scenario: Any) -> str | None:
    """The database a catalog scenario needs (None for other scenarios and the static ceiling)."""
    if scenario.group != "catalog" or not scenario.app.startswith("catalog-"):
        return None
    return scenario.app.rsplit("-", 1)[1]


def build_sqlite(path: Path = SQLITE_PATH) -> None:
    from examples.catalog.settings import build_sqlite as build

    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    build(path)


def write_ceiling(database_url: str, path: Path = CEILING_FILE, host: str = "127.0.0.1:8000") -> int:
    """Writes the ceiling file: the spread's answer closest to the mean size, padded with spaces
    to exactly the mean. Returns that size."""
    from examples.catalog.catalog import Catalog, run
    from examples.catalog.db import connect

    database = connect(database_url)
    catalog = Catalog()
    bodies = []
    try:
        for line in SPREAD:
            values = {name: values[0] for name, values in parse_qs(urlsplit(line).query).items()}
            status, body, _ = run(catalog.answer(values, f"http://{host}"), database.fetch)
            if status == 200:
                bodies.append(body)
    finally:
        database.close()
    mean = round(sum(map(len, bodies)) / len(bodies))
    closest = min((body for body in bodies if len(body) <= mean), key=lambda body: mean - len(body))
    content = closest + b" " * (mean - len(closest))
    if not path.exists() or path.read_bytes() != content:
        partial = path.with_name(f".{path.name}.partial")
        partial.write_bytes(content)
        partial.replace(path)
    return mean


def prepare(scenarios: list[Any], client_cpu: int, log: Any = sys.stderr) -> Prepared:
    """Makes the catalog scenarios runnable: SQLite file, paths file, ceiling file, and the database
    servers the selected scenarios need. Scenarios whose database cannot start are dropped."""
    prepared = Prepared(list(scenarios))
    if not any(scenario.group == "catalog" for scenario in scenarios):
        return prepared
    from examples.catalog import data, dbservers

    log.write("benches: catalog: building the SQLite database and the key spread\n")
    build_sqlite()
    write_paths()
    mean = write_ceiling(DATABASE_URLS["sqlite"])
    log.write(f"benches: catalog: mean answer {mean:,} bytes over {len(SPREAD)} keys (the static ceiling's size)\n")
    needed = {scenario_database(scenario) for scenario in scenarios} - {None, "sqlite"}
    if any(scenario.app.startswith(SHARED_PREFIX) for scenario in scenarios):
        needed.add("redis")
    for kind in sorted(needed):
        reason = dbservers.unavailable(kind)
        if reason is None:
            try:
                server = dbservers.start(kind, cpus=str(client_cpu))
            except (dbservers.StartFailed, OSError) as error:
                reason = f"{kind} did not start: {error}"
            else:
                prepared.servers.append(server)
                try:
                    if kind != "redis":
                        data.build(server.url)
                except Exception as error:  # noqa: BLE001 - any driver error: the database is unusable
                    reason = f"filling {kind} failed: {error}"
                else:
                    DATABASE_URLS[kind] = server.url
                    log.write(f"benches: catalog: {kind} at {server.url} (pid {server.pid}, CPU {client_cpu})\n")
        if reason is not None:
            prepared.notes[kind] = reason
            log.write(f"benches: catalog: skipping the {kind} scenarios: {reason}\n")
            prepared.scenarios = [s for s in prepared.scenarios if kind not in (scenario_database(s), redis_of(s))]
    return prepared


def empty_shared_level(app: str) -> None:
    """Empties the run's Redis before a shared-level row's server starts (nothing for other apps)."""
    if not app.startswith(SHARED_PREFIX):
        return
    import redis

    client = redis.Redis.from_url(DATABASE_URLS["redis"], socket_connect_timeout=5)
    try:
        client.flushdb()
    finally:
        client.close()


def redis_of(scenario: Any) -> str | None:
    """ "redis" for a shared-level row (it needs the Redis server), None for the others."""
    return "redis" if scenario.app.startswith(SHARED_PREFIX) else None


@contextmanager
def prepared_run(scenarios: list[Any], client_cpu: int) -> Iterator[Prepared]:
    prepared = prepare(scenarios, client_cpu)
    try:
        yield prepared
    finally:
        prepared.stop()


# ---------------------------------------------------------------------------
# 100 concurrent misses on one key


def concurrent_gets(host: str, port: int, path: str, count: int, timeout: float = 30.0) -> list[tuple[int, bytes]]:
    """Opens ``count`` connections, then sends one GET on each as close together as a loop can,
    and reads every answer: (status, body) per connection."""
    from benches.httpcheck import ResponseReader

    sockets = [socket.create_connection((host, port), timeout=timeout) for _ in range(count)]
    request = f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode()
    try:
        for sock in sockets:
            sock.sendall(request)
        answers = []
        for sock in sockets:
            response = ResponseReader(sock).read_response()
            answers.append((response.status, response.body))
            # Closed as soon as read: a server that lingers after Connection: close until the client
            # closes (gunicorn's sync worker, up to 2 s) would otherwise wait on every socket in turn.
            sock.close()
        return answers
    finally:
        for sock in sockets:
            sock.close()


def stats(host: str, port: int) -> dict[str, Any]:
    found = read_stats(host, port)
    if found is None:
        raise RuntimeError("the server does not answer /_catalog/stats (CATALOG_ADMIN=1)")
    return found


def measure_misses(
    server_names: list[str], databases: list[str], count: int, settings: Any, extra_env: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    from benches.httpcheck import answers_http, free_port, wait_until_answering
    from benches.processes import ServerProcess
    from benches.runner import server_environment
    from benches.servers import Launch, select_servers, unavailable_reason

    rows = []
    for server in select_servers(server_names):
        reason = unavailable_reason(server, settings.rush_venv, settings.bench_venv)
        for database in databases:
            app = f"catalog-warm-{database}"
            row: dict[str, Any] = {"server": server.name, "database": database}
            rows.append(row)
            if app not in server.apps or reason:
                row["error"] = reason or "no catalog app"
                continue
            port = free_port(settings.host)
            venv = server.venv_dir(settings.rush_venv, settings.bench_venv)
            workdir = settings.log_dir / f"misses-{server.name}-{database}"
            workdir.mkdir(parents=True, exist_ok=True)
            launch = Launch(app, settings.host, port, venv / "bin" if venv else None, workdir)
            env = {**server_environment(server, settings), "CATALOG_ADMIN": "1", **(extra_env or {})}
            command = ["taskset", "-c", str(settings.server_cpu), *server.command(launch)]
            process = ServerProcess(command, cwd=REPO_ROOT, env=env, log_path=workdir / "server.log")
            try:
                wait_until_answering(lambda port=port: answers_http(settings.host, port), 30, process.is_alive)
                path = MISSES_PATH
                # Another key first, so the reference tables are loaded and only the misses count.
                concurrent_gets(settings.host, port, "/nas/?build=42661&arch=noarch&language=enu", 1)
                before = stats(settings.host, port)
                answers = concurrent_gets(settings.host, port, path, count)
                after = stats(settings.host, port)
                statuses = {status for status, _ in answers}
                row.update(
                    requests=count,
                    statuses=sorted(statuses),
                    identical=len({body for _, body in answers}) == 1,
                    queries=after["queries"] - before["queries"],
                    catalogs=after["catalogs"] - before["catalogs"],
                )
            except Exception as error:  # noqa: BLE001 - a failing server is a row with its reason
                row["error"] = f"{type(error).__name__}: {error}"
            finally:
                process.stop(10)
    return rows


def main(argv: list[str] | None = None) -> int:
    from benches.runner import Settings, raise_open_file_limit

    parser = argparse.ArgumentParser(prog="python -m benches.catalog", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    misses = commands.add_parser("misses", help="100 concurrent misses on one key: how many database queries")
    misses.add_argument("--servers", nargs="+", default=["rush", "rush-flask", "gunicorn", "uvicorn"])
    misses.add_argument("--databases", nargs="+", default=list(DATABASES), choices=DATABASES)
    misses.add_argument("--count", type=int, default=100)
    misses.add_argument(
        "--blocking-handlers",
        action="store_true",
        help="CATALOG_ASYNC=0: the rush App's blocking handlers on PostgreSQL too (async by default)",
    )
    arguments = parser.parse_args(argv)

    settings = Settings()
    raise_open_file_limit(4 * arguments.count + 1024)
    os.sched_setaffinity(0, {settings.client_cpu})
    with prepared_run(
        [_Needs(f"catalog-warm-{database}") for database in arguments.databases], settings.client_cpu
    ) as prepared:
        databases = [database for database in arguments.databases if database not in prepared.notes]
        started = time.monotonic()
        extra_env = {"CATALOG_ASYNC": "0"} if arguments.blocking_handlers else {}
        rows = measure_misses(arguments.servers, databases, arguments.count, settings, extra_env)
    print(f"\n{arguments.count} concurrent GETs of one uncached key ({MISSES_PATH}):")
    print(f"{'server':<12} {'database':<11} {'queries':>8} {'catalogs built':>15}  answers")
    for row in rows:
        if "error" in row:
            print(f"{row['server']:<12} {row['database']:<11} {'-':>8} {'-':>15}  {row['error']}")
            continue
        same = "identical" if row["identical"] else "DIFFERENT"
        print(
            f"{row['server']:<12} {row['database']:<11} {row['queries']:>8} {row['catalogs']:>15}  "
            f"statuses {row['statuses']}, bodies {same}"
        )
    for kind, note in prepared.notes.items():
        print(f"{kind}: skipped ({note})")
    print(f"({time.monotonic() - started:.0f} s; server logs in {settings.log_dir})")
    return 0 if all("error" not in row for row in rows) else 1


@dataclass(frozen=True)
class _Needs:
    """A stand-in scenario for `prepare`: only says which database is needed."""

    app: str
    group: str = "catalog"


if __name__ == "__main__":
    # Run as benches.catalog, not as __main__: the servers' commands read DATABASE_URLS from the
    # module that benches.servers imported, which `python -m` would otherwise duplicate.
    from benches.catalog import main as catalog_main

    sys.exit(catalog_main())
