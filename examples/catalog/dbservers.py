"""Throwaway PostgreSQL, MariaDB and Redis servers, for the tests and the benchmarks of the catalog.

`start_postgresql(directory)` and `start_mariadb(directory)` make a fresh
cluster in a new directory under ``directory`` from Debian's packages
(``initdb`` then ``postgres``; ``mariadb-install-db`` then ``mariadbd``),
start the server in the foreground as a child process listening on a free
loopback port (and a Unix socket in its directory), wait until it accepts a
real login, create the ``catalog`` database and user, and return a
`DatabaseServer` with its URL. `start_redis(directory)` starts a
``redis-server`` with persistence off (the catalog's shared cache level,
which the benchmarks put behind two workers) and waits for a ``PING``. `DatabaseServer.stop` ends it by its PID (the
server's fast shutdown, then SIGKILL if it hangs) and removes the directory.

Both refuse to run as root, so when we are root they run as ``nobody``, with
their directory given to that user. Durability is switched off (no fsync):
the data is regenerated for every run. ``cpus`` pins the server with
``taskset`` (the benchmarks put it on the load generator's core, away from the
server under test). `unavailable()` says why a server cannot be started here
(its programs are missing), for a clear skip.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
UNPRIVILEGED_USER = "nobody"


@dataclass
class DatabaseServer:
    """A running throwaway database server."""

    kind: str  # "postgresql", "mariadb" or "redis"
    url: str
    process: subprocess.Popen[bytes]
    directory: Path
    log_path: Path
    stop_signal: int
    _stopped: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        """Stops the server by its PID and removes its directory (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        if self.process.poll() is None:
            self.process.send_signal(self.stop_signal)
            try:
                self.process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> DatabaseServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class StartFailed(RuntimeError):
    """A database server could not be made or started; the message has its log's last lines."""


def postgres_bin() -> Path | None:
    """The directory of Debian's newest PostgreSQL programs (they are not on PATH there)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("postgres")
    return Path(on_path).parent if on_path and shutil.which("initdb") else None


def unavailable(kind: str) -> str | None:
    """Why ``kind`` ("postgresql", "mariadb" or "redis") cannot be started here (None when it can)."""
    if kind == "redis":
        if shutil.which("redis-server") is None:
            return "Redis is not installed (Debian: apt-get install redis-server; make test-tools)"
        return None
    if kind == "postgresql":
        if postgres_bin() is None:
            return "PostgreSQL is not installed (Debian: apt-get install postgresql; make test-tools)"
        return None
    if shutil.which("mariadbd") is None or shutil.which("mariadb-install-db") is None:
        return "MariaDB is not installed (Debian: apt-get install mariadb-server; make test-tools)"
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_as() -> dict[str, Any]:
    """Popen arguments that drop root to an unprivileged user (nothing when we are not root)."""
    if os.geteuid() != 0:
        return {}
    entry = pwd.getpwnam(UNPRIVILEGED_USER)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


def make_directory(parent: Path | None, prefix: str) -> Path:
    """A new directory for one server, owned by the user the server runs as. Under /tmp by default:
    the server's user must be able to reach it (pytest's own temporary directories are 0700)."""
    directory = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    directory.chmod(0o755)
    if os.geteuid() == 0:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
        os.chown(directory, entry.pw_uid, entry.pw_gid)
    return directory


def pinned(argv: Sequence[str], cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus, *argv] if cpus else list(argv)


def run_setup(argv: Sequence[str], log_path: Path, directory: Path) -> None:
    with open(log_path, "ab") as log:
        completed = subprocess.run(
            list(argv), stdout=log, stderr=subprocess.STDOUT, cwd=directory, check=False, timeout=300, **run_as()
        )
    if completed.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-20:])
        raise StartFailed(f"`{' '.join(argv)}` failed with {completed.returncode}:\n{tail}")


def wait_until_ready(server: DatabaseServer, login: Callable[[], None]) -> None:
    """Polls a real login until it succeeds; fails at once if the server exits, or at the timeout."""
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if server.process.poll() is not None:
            raise StartFailed(f"{server.kind} exited with {server.process.returncode}:\n{server.log_tail()}")
        try:
            login()
            return
        # Any failed login means "not yet" (refused, starting up, still creating its files).
        except Exception as error:
            if time.monotonic() > deadline:
                message = f"{server.kind} did not accept a login within {START_TIMEOUT:g} s: {error}"
                raise StartFailed(message) from error
        time.sleep(0.05)


def start_postgresql(parent: Path | None = None, cpus: str | None = None) -> DatabaseServer:
    """A fresh PostgreSQL cluster with an empty ``catalog`` database owned by user ``catalog``."""
    import psycopg

    binaries = postgres_bin()
    if binaries is None:
        raise StartFailed(unavailable("postgresql") or "PostgreSQL is missing")
    directory = make_directory(parent, "catalog-postgresql-")
    data = directory / "data"
    log_path = directory / "server.log"
    log_path.touch()
    if os.geteuid() == 0:
        os.chown(log_path, pwd.getpwnam(UNPRIVILEGED_USER).pw_uid, -1)
    try:
        # trust: the server listens on loopback only, for one test or benchmark session.
        run_setup(
            [str(binaries / "initdb"), "-D", str(data), "-U", "catalog", "--auth=trust", "-E", "UTF8", "--no-locale"],
            log_path,
            directory,
        )
        port = free_port()
        argv = [
            str(binaries / "postgres"),
            "-D",
            str(data),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-k",
            str(directory),
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=200",
        ]
        server = launch("postgresql", argv, cpus, directory, log_path, signal.SIGINT)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    base = f"postgresql://catalog@127.0.0.1:{port}"
    try:
        wait_until_ready(server, lambda: psycopg.connect(f"{base}/postgres", connect_timeout=2).close())
        with psycopg.connect(f"{base}/postgres", autocommit=True) as connection:
            connection.execute("CREATE DATABASE catalog")
    except BaseException:
        server.stop()
        raise
    server.url = f"{base}/catalog"
    return server


def start_mariadb(parent: Path | None = None, cpus: str | None = None) -> DatabaseServer:
    """A fresh MariaDB data directory with an empty ``catalog`` database and a ``catalog`` user
    without password (loopback only)."""
    import pymysql

    if unavailable("mariadb"):
        raise StartFailed(unavailable("mariadb") or "MariaDB is missing")
    directory = make_directory(parent, "catalog-mariadb-")
    data = directory / "data"
    log_path = directory / "server.log"
    log_path.touch()
    if os.geteuid() == 0:
        os.chown(log_path, pwd.getpwnam(UNPRIVILEGED_USER).pw_uid, -1)
    socket_path = directory / "mariadb.sock"
    try:
        run_setup(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={data}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            log_path,
            directory,
        )
        port = free_port()
        argv = [
            shutil.which("mariadbd") or "mariadbd",
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={socket_path}",
            f"--port={port}",
            "--bind-address=127.0.0.1",
            f"--pid-file={directory / 'mariadb.pid'}",
            # Its own temporary files in its own directory: in /tmp, a cleaner (or another test
            # session) removing them turns a query into "Error on delete of '/tmp/#sql-temptable'".
            f"--tmpdir={directory}",
            "--tmp-table-size=64M",
            "--max-heap-table-size=64M",
            "--skip-log-bin",
            "--innodb-flush-log-at-trx-commit=0",
            "--innodb-doublewrite=0",
            "--innodb-buffer-pool-size=128M",
            "--max-connections=200",
            "--character-set-server=utf8mb4",
            "--collation-server=utf8mb4_bin",
        ]
        server = launch("mariadb", argv, cpus, directory, log_path, signal.SIGTERM)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise

    def as_root() -> Any:
        return pymysql.connect(unix_socket=str(socket_path), user="root", connect_timeout=2, autocommit=True)

    try:
        wait_until_ready(server, lambda: as_root().close())
        connection = as_root()
        with contextlib.closing(connection), connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE catalog CHARACTER SET utf8mb4")
            cursor.execute("CREATE USER 'catalog'@'%'")
            cursor.execute("GRANT ALL ON catalog.* TO 'catalog'@'%'")
            cursor.execute("CREATE USER 'catalog'@'localhost'")
            cursor.execute("GRANT ALL ON catalog.* TO 'catalog'@'localhost'")
    except BaseException:
        server.stop()
        raise
    server.url = f"mysql://catalog@127.0.0.1:{port}/catalog"
    return server


def launch(
    kind: str, argv: list[str], cpus: str | None, directory: Path, log_path: Path, stop_signal: int
) -> DatabaseServer:
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            pinned(argv, cpus),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=directory,
            start_new_session=True,
            **run_as(),
        )
    return DatabaseServer(kind, "", process, directory, log_path, stop_signal)


def start_redis(parent: Path | None = None, cpus: str | None = None) -> DatabaseServer:
    """A Redis server on a free loopback port, nothing saved to disk, database 0 empty."""
    import redis

    if shutil.which("redis-server") is None:
        raise StartFailed(unavailable("redis") or "Redis is missing")
    directory = make_directory(parent, "catalog-redis-")
    log_path = directory / "server.log"
    log_path.touch()
    if os.geteuid() == 0:
        os.chown(log_path, pwd.getpwnam(UNPRIVILEGED_USER).pw_uid, -1)
    port = free_port()
    argv = ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    argv += ["--dir", str(directory)]
    server = launch("redis", argv, cpus, directory, log_path, signal.SIGTERM)
    url = f"redis://127.0.0.1:{port}/0"

    def ping() -> None:
        client = redis.Redis.from_url(url, socket_connect_timeout=2)
        try:
            client.ping()
        finally:
            client.close()

    try:
        wait_until_ready(server, ping)
    except BaseException:
        server.stop()
        raise
    server.url = url
    return server


STARTERS: dict[str, Callable[..., DatabaseServer]] = {
    "postgresql": start_postgresql,
    "mariadb": start_mariadb,
    "redis": start_redis,
}


def start(kind: str, parent: Path | None = None, cpus: str | None = None) -> DatabaseServer:
    return STARTERS[kind](parent, cpus)
