"""The reliability scenarios of issue 22, run against rush and its peers in one run, as one table.

    python -m benches.reliability              # every server, full counts (about 10 minutes)
    python -m benches.reliability --quick      # tiny counts, seconds per server (make test runs it for rush)

Each server serves the hello endpoint of benches/apps/ (rush its App, uvicorn
and granian the plain ASGI app, gunicorn the plain WSGI app with its default
sync worker) on 127.0.0.1, and is started afresh for each scenario:

* slowloris (one worker): N connections each dripping a request head one
  byte per interval (the head is longer than the run lets through); while
  they drip, a fresh client asks for ``/``. Reported: whether it was
  answered, and when the server cut each dripper off (or that it had not
  when the run gave up on it);
* idle keep-alive (one worker): N connections each make one request, read
  the answer and stay open; then a fresh client asks for ``/``. Reported:
  whether it was answered, how many of the N the server still held, and the
  server's RSS (every process of its tree). The N get 60 s to be opened in
  all (200 at a time), so a server that stops accepting cannot hold the run
  up; those left unanswered are reported. Keep-alive timeouts are raised
  to 120 s where a flag exists, so that the connections are there to hold;
  the open-file limit is raised to its hard limit (servers inherit it);
* kill -9 of a worker under load (two workers): keep-alive clients, each
  pacing its requests (the same offered load for every server), for a
  bounded time and count; one worker is killed (SIGKILL) a third of the way in;
* two HUPs and a TERM under load (two workers): the same load, a SIGHUP at
  20% and 40% of the time, a SIGTERM at 70%, after which no new request is
  begun; every request begun before it must be answered;
* 20 clients racing one HUP (two workers): 20 clients each opening a new
  connection per request; a SIGHUP once each has been answered once; the
  load goes on until every worker older than the HUP has exited, and at
  least 3 s;
* h2 rapid reset (one worker, HTTP/2 in cleartext, for the servers that
  speak it: rush ``--http auto``, granian ``--http auto``): a normal client
  asks for ``/`` over one HTTP/2 connection, one request at a time, first
  quietly, then while another process floods the server with Rapid Reset
  (CVE-2023-44487: HEADERS and RST_STREAM for thousands of streams, a new
  connection each time the server closes one). Reported: the normal
  client's p99 latency quiet and under the flood (issue 24's target: under
  2x), how the flood's connections ended (GOAWAY ENHANCE_YOUR_CALM, or
  closed) and whether the worker survived (the same pid).

Counting, the same for every server: a request fails when no complete
``200 Hello, World!`` arrives within 10 s (refused, reset, closed early,
timed out, wrong answer). A request sent on a reused keep-alive connection
that the server closed before sending a single byte is retried once on a
new connection, as RFC 9112 section 9.3.1 lets a client do with an
idempotent request (a graceful reload has to close idle connections, and the
client cannot tell that from a close that raced its request); the retry's
outcome is what counts, and the retries are reported. After a SIGTERM a
retry that is refused is not a failure (the server is stopping as asked);
these are reported too.

Only processes this script started are signalled, by PID (benches.processes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import multiprocessing.synchronize
import os
import queue
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benches import REPO_ROOT
from benches.processes import ServerProcess, memory_bytes, process_tree

HOST = "127.0.0.1"
REQUEST_TIMEOUT = 10.0
READY_TIMEOUT = 60.0
PROBE_TIMEOUT = 5.0
BODY = b"Hello, World!"


# ---------------------------------------------------------------------------
# The servers


@dataclass(frozen=True)
class Peer:
    name: str
    program: Path
    argv: Callable[[Path, int, int, bool], list[str]]  # (program, port, workers, long keep-alive) -> argv
    note: str = ""
    # The argv with HTTP/2 in cleartext (prior knowledge) turned on; None: the server has none.
    h2c: Callable[[list[str]], list[str]] | None = None

    def missing(self) -> str | None:
        return None if self.program.exists() else f"{self.program} not found"


def rush_argv(program: Path, port: int, workers: int, long_keep_alive: bool) -> list[str]:
    extra = ["--keep-alive-timeout", "120"] if long_keep_alive else []
    return [
        str(program),
        "benches.apps.rush_app:app",
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
        *extra,
    ]


def uvicorn_argv(program: Path, port: int, workers: int, long_keep_alive: bool) -> list[str]:
    extra = ["--timeout-keep-alive", "120"] if long_keep_alive else []
    return [
        str(program),
        "benches.apps.asgi_app:app",
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--lifespan",
        "off",
        "--no-access-log",
        "--log-level",
        "warning",
        *extra,
    ]


def gunicorn_argv(program: Path, port: int, workers: int, long_keep_alive: bool) -> list[str]:
    # The default sync worker answers one request per connection: --keep-alive does not apply to it.
    bind = f"{HOST}:{port}"
    return [
        str(program),
        "--bind",
        bind,
        "--workers",
        str(workers),
        "--log-level",
        "warning",
        "benches.apps.wsgi_app:app",
    ]


def granian_argv(program: Path, port: int, workers: int, long_keep_alive: bool) -> list[str]:
    # Without --respawn-failed-workers a worker's death stops the whole server; a production set-up
    # would turn it on, so it is on here. HTTP/1 keep-alive has no idle timeout to raise.
    return [
        str(program),
        "--interface",
        "asgi",
        "--host",
        HOST,
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--http",
        "1",
        "--respawn-failed-workers",
        "--log-level",
        "warning",
        "--no-access-log",
        "benches.apps.asgi_app:app",
    ]


def rush_h2c(argv: list[str]) -> list[str]:
    return [*argv, "--http", "auto"]


def granian_h2c(argv: list[str]) -> list[str]:
    at = argv.index("--http")
    return [*argv[: at + 1], "auto", *argv[at + 2 :]]


def peers(venv: Path, granian: Path | None) -> list[Peer]:
    bench_granian = REPO_ROOT / ".venv-bench" / "bin" / "granian"
    if granian is None:
        granian = venv / "bin" / "granian"
        if not granian.exists() and bench_granian.exists():
            granian = bench_granian
    return [
        Peer("rush", venv / "bin" / "rush", rush_argv, "rush App", h2c=rush_h2c),
        Peer("uvicorn", venv / "bin" / "uvicorn", uvicorn_argv, "ASGI, its multiprocess supervisor for 2 workers"),
        Peer("gunicorn", venv / "bin" / "gunicorn", gunicorn_argv, "WSGI, default sync worker"),
        Peer("granian", granian, granian_argv, "ASGI, --respawn-failed-workers", h2c=granian_h2c),
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def workers_of(root: int) -> set[int]:
    """The direct children of ``root`` that are workers (multiprocessing's resource tracker is not)."""
    found: set[int] = set()
    with contextlib.suppress(FileNotFoundError):
        for task in os.listdir(f"/proc/{root}/task"):
            with contextlib.suppress(FileNotFoundError), open(f"/proc/{root}/task/{task}/children") as handle:
                found.update(int(child) for child in handle.read().split())
    workers = set()
    for pid in found:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if b"resource_tracker" not in cmdline and state not in ("Z", "X"):
            workers.add(pid)
    return workers


class Running:
    """One server started for one scenario."""

    def __init__(
        self,
        peer: Peer,
        workers: int,
        log_dir: Path,
        scenario: str,
        long_keep_alive: bool = False,
        http2: bool = False,
    ):
        self.port = free_port()
        self.workers = workers
        env = {key: value for key, value in os.environ.items() if not key.startswith(("RUSH_", "GRANIAN_"))}
        env["PYTHONPATH"] = str(REPO_ROOT)
        env.pop("WEB_CONCURRENCY", None)
        argv = peer.argv(peer.program, self.port, workers, long_keep_alive)
        if http2:
            assert peer.h2c is not None
            argv = peer.h2c(argv)
        self.process = ServerProcess(argv, cwd=REPO_ROOT, env=env, log_path=log_dir / f"{peer.name}-{scenario}.log")

    def wait_ready(self) -> None:
        """Until ``/`` is answered and every worker has started (each answers through the shared port)."""
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if not self.process.is_alive():
                raise RuntimeError(f"exited at start: {self.process.log_tail(5)}")
            if (self.workers == 1 or len(workers_of(self.process.pid)) >= self.workers) and probe_sync(self.port):
                return
            time.sleep(0.1)
        raise RuntimeError(f"not ready within {READY_TIMEOUT:g}s: {self.process.log_tail(5)}")

    def signal(self, signum: int) -> None:
        if self.process.is_alive():
            os.kill(self.process.pid, signum)

    def rss_bytes(self) -> int:
        return memory_bytes(process_tree(self.process.pid))

    def stop(self) -> None:
        self.process.stop(timeout=15.0)


def probe_sync(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1.0) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: reliability\r\nConnection: close\r\n\r\n")
            return sock.recv(12).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


# ---------------------------------------------------------------------------
# The client


class NoResponse(Exception):
    """The connection ended (FIN or RST) before a single byte of the response."""


class BadResponse(Exception):
    pass


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.used = reader, writer, 0

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, port), REQUEST_TIMEOUT)
        return cls(reader, writer)

    def close(self) -> None:
        self.writer.close()

    async def get(self, keep_alive: bool = True) -> bool:
        """One ``GET /``; True when the connection may be used again. Raises NoResponse or another error."""
        connection = b"" if keep_alive else b"Connection: close\r\n"
        self.writer.write(b"GET / HTTP/1.1\r\nHost: reliability\r\n" + connection + b"\r\n")
        self.used += 1
        async with asyncio.timeout(REQUEST_TIMEOUT):
            try:
                head = await self.reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as error:
                if not error.partial:
                    raise NoResponse from None
                raise BadResponse("closed inside the head") from None
            except ConnectionResetError:
                raise NoResponse from None
            lines = head.decode("latin-1").split("\r\n")
            if not lines[0].startswith("HTTP/1.1 200"):
                raise BadResponse(lines[0][:40])
            fields = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                fields[name.strip().lower()] = value.strip().lower()
            if "content-length" in fields:
                body = await self.reader.readexactly(int(fields["content-length"]))
            elif fields.get("transfer-encoding") == "chunked":
                body = b""
                while True:
                    size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    chunk = await self.reader.readexactly(size + 2)
                    if size == 0:
                        break
                    body += chunk[:-2]
            else:
                body = await self.reader.read()
            if body != BODY:
                raise BadResponse(f"body {body[:20]!r}")
        return keep_alive and fields.get("connection") != "close"


@dataclass
class Tally:
    answered: int = 0
    failed: int = 0
    retried: int = 0
    refused_after_term: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def cell(self) -> str:
        text = f"{self.failed:,} failed of {self.answered + self.failed:,}"
        extras = []
        if self.retried:
            extras.append(f"{self.retried:,} retried")
        if self.refused_after_term:
            extras.append(f"{self.refused_after_term:,} refused after TERM")
        return text + (f" ({', '.join(extras)})" if extras else "")


def reason(error: BaseException) -> str:
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, NoResponse):
        return "closed without a response"
    if isinstance(error, asyncio.IncompleteReadError):
        return "closed mid-response"
    if isinstance(error, OSError):
        return type(error).__name__
    return f"{type(error).__name__}: {error}"


@dataclass
class Load:
    """Clients that repeat ``GET /``, each at most ``rate`` times a second (the same offered load for
    every server), until ``stop`` is set or ``budget`` requests were begun."""

    port: int
    budget: int
    rate: float
    keep_alive: bool = True
    tally: Tally = field(default_factory=Tally)
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    terminated: bool = False  # set when SIGTERM was sent: a refused retry is then not a failure
    began: int = 0
    answered_by_client: Counter[int] = field(default_factory=Counter)

    async def client(self, number: int) -> None:
        connection: Connection | None = None
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        try:
            while not self.stop.is_set() and self.began < self.budget:
                # Paced, not flooded: a late client does not catch up with a burst.
                next_at = max(next_at + 1 / self.rate, loop.time())
                await asyncio.sleep(next_at - loop.time())
                if self.stop.is_set():
                    break
                self.began += 1
                try:
                    if connection is None:
                        connection = await Connection.open(self.port)
                    reused = connection.used > 0
                    try:
                        keep = await connection.get(self.keep_alive)
                    except NoResponse:
                        if not reused:
                            raise
                        connection.close()
                        connection = None
                        self.tally.retried += 1
                        try:
                            connection = await Connection.open(self.port)
                        except ConnectionRefusedError:
                            if self.terminated:
                                self.tally.refused_after_term += 1
                                return
                            raise
                        keep = await connection.get(self.keep_alive)
                    self.tally.answered += 1
                    self.answered_by_client[number] += 1
                    if not keep:
                        connection.close()
                        connection = None
                except (OSError, TimeoutError, NoResponse, BadResponse, asyncio.IncompleteReadError) as error:
                    self.tally.failed += 1
                    self.tally.reasons[reason(error)] += 1
                    if connection is not None:
                        connection.close()
                    connection = None
                    if self.terminated:
                        return
        finally:
            if connection is not None:
                connection.close()

    async def run(self, clients: int) -> None:
        await asyncio.gather(*(self.client(number) for number in range(clients)))


async def fresh_client(port: int) -> str:
    """Whether a new client is answered within PROBE_TIMEOUT, and how fast."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            connection = await Connection.open(port)
            try:
                await connection.get(keep_alive=False)
            finally:
                connection.close()
    except TimeoutError:
        return f"no (nothing in {PROBE_TIMEOUT:g} s)"
    except (OSError, NoResponse, BadResponse, asyncio.IncompleteReadError) as error:
        return f"no ({reason(error)})"
    return f"yes ({time.monotonic() - started:.2f} s)"


# ---------------------------------------------------------------------------
# The scenarios


@dataclass(frozen=True)
class Sizes:
    drippers: int
    drip_interval: float
    drip_give_up: float
    idle: int
    idle_open_limit: float  # seconds for opening them all
    load_clients: int
    load_rate: float  # requests a second per client
    load_seconds: float
    load_budget: int
    race_clients: int
    race_rate: float
    race_budget: int
    race_give_up: float
    race_at_least: float  # the load goes on at least this long after the HUP, even when the reload is quicker
    h2_seconds: float = 10.0  # the normal HTTP/2 client's time quiet, then again under the Rapid Reset flood


FULL = Sizes(50, 1.0, 40.0, 10_000, 60.0, 16, 200.0, 12.0, 100_000, 20, 50.0, 100_000, 40.0, 3.0)
QUICK = Sizes(3, 0.2, 1.5, 30, 10.0, 4, 200.0, 2.0, 10_000, 20, 50.0, 10_000, 15.0, 0.5, h2_seconds=1.5)


async def slowloris(server: Running, sizes: Sizes) -> dict:
    head = b"GET / HTTP/1.1\r\nHost: reliability\r\nX-Drip: " + b"d" * 4000 + b"\r\n\r\n"

    async def drip() -> float | None:
        """Seconds until the server cut this connection off, None if it had not by the give-up time."""
        reader, writer = await asyncio.open_connection(HOST, server.port)
        started = time.monotonic()
        try:
            for byte in head:
                if time.monotonic() - started > sizes.drip_give_up:
                    return None
                writer.write(bytes([byte]))
                with contextlib.suppress(TimeoutError):
                    # Anything the server sends (a 408) or its close ends the drip.
                    await asyncio.wait_for(reader.read(65536), sizes.drip_interval)
                    break
            return time.monotonic() - started
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - started
        finally:
            writer.transport.abort()

    drips = [asyncio.ensure_future(drip()) for _ in range(sizes.drippers)]
    # The fresh client comes once every dripper has begun.
    await asyncio.sleep(min(2.0, sizes.drip_give_up / 2))
    fresh = await fresh_client(server.port)
    cut = await asyncio.gather(*drips)
    times = sorted(value for value in cut if value is not None)
    still = sum(value is None for value in cut)
    if times:
        timing = f"cut off after {statistics.median(times):.1f} s (median), {times[-1]:.1f} s (max)"
        if still:
            timing += f"; {still} still open at {sizes.drip_give_up:g} s"
    else:
        timing = f"none cut off in {sizes.drip_give_up:g} s"
    return {
        "cell": f"fresh client: {fresh}; {timing}",
        "fresh": fresh,
        "cut_seconds": [None if value is None else round(value, 2) for value in cut],
        "drippers": sizes.drippers,
    }


async def idle_keep_alive(server: Running, sizes: Sizes) -> dict:
    baseline = server.rss_bytes()
    opened: list[Connection] = []
    errors: Counter[str] = Counter()
    gate = asyncio.Semaphore(200)
    answered_then_closed: list[int] = []  # answered with Connection: close (gunicorn's sync worker)

    async def open_one() -> None:
        connection = None
        async with gate:
            try:
                connection = await Connection.open(server.port)
                if await connection.get():
                    opened.append(connection)
                    connection = None
                else:
                    answered_then_closed.append(1)
            except (OSError, TimeoutError, NoResponse, BadResponse, asyncio.IncompleteReadError) as error:
                errors[reason(error)] += 1
            finally:
                # Also when the opening's time is up (cancelled): nothing is left half-open.
                if connection is not None:
                    connection.close()

    # A server that stops accepting would otherwise hold this up for 10 s per connection.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(sizes.idle_open_limit):
            await asyncio.gather(*(open_one() for _ in range(sizes.idle)))
    unanswered = sizes.idle - len(opened) - len(answered_then_closed) - sum(errors.values())
    if unanswered:
        errors[f"not answered within the {sizes.idle_open_limit:g} s given to open them all"] = unanswered
    fresh = await fresh_client(server.port)
    rss = server.rss_bytes()
    await asyncio.sleep(0)  # lets the closes that arrived be read
    held = sum(not connection.reader.at_eof() for connection in opened)
    for connection in opened:
        connection.close()
    megabytes = rss / 2**20
    cell = f"fresh client: {fresh}; {held:,} of {sizes.idle:,} held; RSS {megabytes:.0f} MB"
    if errors:
        cell += f"; {sum(errors.values()):,} not answered"
    return {
        "cell": cell,
        "fresh": fresh,
        "held": held,
        "connections": sizes.idle,
        "rss_bytes": rss,
        "rss_before_bytes": baseline,
        "errors": dict(errors),
    }


async def kill_worker(server: Running, sizes: Sizes) -> dict:
    load = Load(server.port, sizes.load_budget, sizes.load_rate)
    running = asyncio.ensure_future(load.run(sizes.load_clients))
    await asyncio.sleep(sizes.load_seconds / 3)
    spent_before(running, "the kill")
    victim = min(workers_of(server.process.pid))
    os.kill(victim, signal.SIGKILL)
    await asyncio.sleep(sizes.load_seconds * 2 / 3)
    load.stop.set()
    await running
    after = workers_of(server.process.pid)
    replaced = "worker replaced" if len(after) >= server.workers and victim not in after else "not replaced"
    if not server.process.is_alive():
        replaced = "server exited"
    return {"cell": f"{load.tally.cell()}; {replaced}", **tally_json(load.tally), "after": replaced}


async def hups_and_term(server: Running, sizes: Sizes) -> dict:
    load = Load(server.port, sizes.load_budget, sizes.load_rate)
    running = asyncio.ensure_future(load.run(sizes.load_clients))
    for fraction, signum in ((0.2, signal.SIGHUP), (0.2, signal.SIGHUP), (0.3, signal.SIGTERM)):
        await asyncio.sleep(sizes.load_seconds * fraction)
        spent_before(running, signal.Signals(signum).name)
        if signum == signal.SIGTERM:
            # From here no request is begun; those already begun must be answered.
            load.terminated = True
            load.stop.set()
        server.signal(signum)
    await running
    try:
        code = await asyncio.to_thread(server.process.popen.wait, 40.0)
        exit_text = f"exit {code}"
    except subprocess.TimeoutExpired:
        exit_text = "still running 40 s after TERM"
    return {"cell": f"{load.tally.cell()}; {exit_text}", **tally_json(load.tally), "exit": exit_text}


async def race_hup(server: Running, sizes: Sizes) -> dict:
    load = Load(server.port, sizes.race_budget, sizes.race_rate, keep_alive=False)
    running = asyncio.ensure_future(load.run(sizes.race_clients))
    deadline = time.monotonic() + sizes.race_give_up
    while len(load.answered_by_client) < sizes.race_clients and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    spent_before(running, "the HUP")
    old = workers_of(server.process.pid)
    server.signal(signal.SIGHUP)
    at_least = time.monotonic() + sizes.race_at_least
    while time.monotonic() < deadline and not running.done():
        if time.monotonic() >= at_least and not workers_of(server.process.pid) & old:
            break
        await asyncio.sleep(0.05)
    if not workers_of(server.process.pid) & old:
        finished = "reload done"
    elif running.done():
        finished = "load's budget spent before the reload ended"
    else:
        finished = f"reload not done in {sizes.race_give_up:g} s"
    load.stop.set()
    await running
    return {"cell": f"{load.tally.cell()}; {finished}", **tally_json(load.tally), "reload": finished}


async def h2_rapid_reset(server: Running, sizes: Sizes) -> dict:
    """The normal client's p99 quiet, then under a Rapid Reset flood from another process."""
    (worker,) = workers_of(server.process.pid)
    quiet = await asyncio.to_thread(h2_latencies, server.port, sizes.h2_seconds)
    stop, flooding = multiprocessing.Event(), multiprocessing.Event()
    ends: multiprocessing.Queue = multiprocessing.Queue()
    flooder = multiprocessing.Process(target=rapid_reset_flood, args=(server.port, stop, flooding, ends), daemon=True)
    flooder.start()
    try:
        # The measurement starts once the first burst went out.
        if not await asyncio.to_thread(flooding.wait, 10.0):
            raise RuntimeError("the flooder sent nothing in 10 s")
        flooded = await asyncio.to_thread(h2_latencies, server.port, sizes.h2_seconds)
    finally:
        stop.set()
        try:
            # Read before the join: a child exits only once its queue is flushed.
            endings: Counter[str] = await asyncio.to_thread(ends.get, True, 15.0)
        except queue.Empty:
            endings = Counter({"flooder reported nothing": 1})
        flooder.join(10.0)
        if flooder.is_alive():
            flooder.kill()
    survived = worker in workers_of(server.process.pid)
    p99_quiet, p99_flood = percentile(quiet, 99), percentile(flooded, 99)
    ratio = p99_flood / p99_quiet if p99_quiet else float("nan")
    ended = ", ".join(f"{count:,} {how}" for how, count in endings.most_common())
    cell = (
        f"p99 {p99_quiet * 1000:.2f} ms quiet, {p99_flood * 1000:.2f} ms under the flood ({ratio:.2f}x; "
        f"{len(quiet):,} and {len(flooded):,} requests); flood connections: {ended}; "
        f"worker {'survived' if survived else 'replaced'}"
    )
    return {
        "cell": cell,
        "p99_quiet_seconds": p99_quiet,
        "p99_flood_seconds": p99_flood,
        "ratio": ratio,
        "requests": [len(quiet), len(flooded)],
        "flood_endings": dict(endings),
        "survived": survived,
    }


def percentile(values: list[float], which: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * which / 100))]


def h2_latencies(port: int, seconds: float) -> list[float]:
    """``GET /`` over one HTTP/2 connection (the ``h2`` package), one request
    at a time for ``seconds``; the latency of each (a wrong or missing answer raises)."""
    import h2.config
    import h2.connection
    import h2.events

    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    latencies: list[float] = []
    with socket.create_connection((HOST, port), timeout=REQUEST_TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection.initiate_connection()
        sock.sendall(connection.data_to_send())
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            stream = connection.get_next_available_stream_id()
            started = time.perf_counter()
            connection.send_headers(
                stream, [(":method", "GET"), (":scheme", "http"), (":path", "/"), (":authority", HOST)], True
            )
            sock.sendall(connection.data_to_send())
            body, done = b"", False
            while not done:
                data = sock.recv(65536)
                if not data:
                    raise BadResponse("the server closed the normal client's connection")
                for event in connection.receive_data(data):
                    if isinstance(event, h2.events.DataReceived) and event.stream_id == stream:
                        body += event.data
                        connection.acknowledge_received_data(event.flow_controlled_length, stream)
                    elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream:
                        done = True
                    elif isinstance(event, (h2.events.StreamReset, h2.events.ConnectionTerminated)):
                        raise BadResponse(f"the normal client got {type(event).__name__}")
                sock.sendall(connection.data_to_send())
            latencies.append(time.perf_counter() - started)
            if body != BODY:
                raise BadResponse(f"body {body[:20]!r}")
    return latencies


def rapid_reset_flood(
    port: int,
    stop: multiprocessing.synchronize.Event,
    flooding: multiprocessing.synchronize.Event,
    ends: multiprocessing.Queue,
) -> None:
    """Runs in its own process: connection after connection, HEADERS and
    RST_STREAM(CANCEL) for 1000 streams per write until the server closes it
    (``flooding`` is set after the first write); puts how the connections
    ended (a Counter) on ``ends`` once ``stop`` is set."""

    def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
        return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload

    # :method GET, :scheme http, :path / from HPACK's static table, :authority a literal not indexed.
    block = b"\x82\x86\x84" + bytes([0x01, len(HOST)]) + HOST.encode()
    endings: Counter[str] = Counter()
    while not stop.is_set():
        try:
            with socket.create_connection((HOST, port), timeout=REQUEST_TIMEOUT) as sock:
                sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b""))
                stream = 1
                try:
                    while not stop.is_set() and stream < 2**31 - 2000:
                        burst = b"".join(
                            frame(1, 0x5, id_, block) + frame(3, 0, id_, (8).to_bytes(4, "big"))
                            for id_ in range(stream, stream + 2000, 2)
                        )
                        sock.sendall(burst)
                        flooding.set()
                        stream += 2000
                except OSError:
                    pass
                endings[_flood_ending(sock)] += 1
        except OSError as error:
            endings[f"could not connect ({type(error).__name__})"] += 1
    ends.put(endings)


def _flood_ending(sock: socket.socket) -> str:
    """How the server ended a flood connection: the GOAWAY code it sent, if any."""
    sock.settimeout(2.0)
    data = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            data += chunk
    while len(data) >= 9:
        length, kind = int.from_bytes(data[:3], "big"), data[3]
        if kind == 7 and len(data) >= 17:
            code = int.from_bytes(data[13:17], "big")
            return "GOAWAY ENHANCE_YOUR_CALM" if code == 0xB else f"GOAWAY code {code}"
        data = data[9 + length :]
    return "closed without GOAWAY"


def spent_before(running: asyncio.Future, event: str) -> None:
    if running.done():
        raise RuntimeError(f"the load's request budget was spent before {event}: raise it")


def tally_json(tally: Tally) -> dict:
    return {
        "answered": tally.answered,
        "failed": tally.failed,
        "retried": tally.retried,
        "refused_after_term": tally.refused_after_term,
        "reasons": dict(tally.reasons),
    }


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    workers: int
    run: Callable[[Running, Sizes], object]
    long_keep_alive: bool = False
    http2: bool = False  # served with HTTP/2 in cleartext (the peers that have none are skipped)


SCENARIOS = [
    Scenario("slowloris", "slowloris (1 worker)", 1, slowloris),
    Scenario("idle", "idle keep-alive connections (1 worker)", 1, idle_keep_alive, long_keep_alive=True),
    Scenario("kill", "kill -9 of a worker under load (2 workers)", 2, kill_worker),
    Scenario("hups-term", "two HUPs and a TERM under load (2 workers)", 2, hups_and_term),
    Scenario("race-hup", "20 clients racing one HUP (2 workers)", 2, race_hup),
    Scenario("h2-rapid-reset", "h2 rapid reset (1 worker)", 1, h2_rapid_reset, http2=True),
]


def run_one(peer: Peer, scenario: Scenario, sizes: Sizes, log_dir: Path) -> dict:
    if scenario.http2 and peer.h2c is None:
        return {"cell": "no HTTP/2 in cleartext", "error": True}
    server = Running(peer, scenario.workers, log_dir, scenario.key, scenario.long_keep_alive, scenario.http2)
    try:
        server.wait_ready()
        result = asyncio.run(scenario.run(server, sizes))  # type: ignore[arg-type]
    except Exception as error:  # noqa: BLE001 - a scenario that could not run says why in its cell
        result = {"cell": f"error: {type(error).__name__}: {error}"[:200], "error": True}
    finally:
        server.stop()
    return result


def raise_open_files() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def table(results: dict[str, dict[str, dict]], names: list[str], sizes: Sizes) -> str:
    load = f"{sizes.load_clients} keep-alive clients x {sizes.load_rate:g}/s for {sizes.load_seconds:g} s"
    race = f"a new connection per request, {sizes.race_clients} x {sizes.race_rate:g}/s"
    titles = {
        "slowloris": f"slowloris: {sizes.drippers} drippers, 1 byte / {sizes.drip_interval:g} s (1 worker)",
        "idle": f"{sizes.idle:,} idle keep-alive connections (1 worker)",
        "kill": f"kill -9 of a worker under load: {load} (2 workers)",
        "hups-term": f"two HUPs and a TERM under load: {load} (2 workers)",
        "race-hup": f"{sizes.race_clients} clients racing one HUP, {race} (2 workers)",
        "h2-rapid-reset": f"h2 rapid reset: a normal client's hello p99, {sizes.h2_seconds:g} s quiet, then "
        f"{sizes.h2_seconds:g} s under the flood (1 worker)",
    }
    lines = ["| scenario | " + " | ".join(names) + " |", "| --- | " + " | ".join("---" for _ in names) + " |"]
    for scenario in SCENARIOS:
        if not any(scenario.key in results.get(name, {}) for name in names):
            continue
        cells = [results.get(name, {}).get(scenario.key, {}).get("cell", "not run") for name in names]
        lines.append(f"| {titles[scenario.key]} | " + " | ".join(cell.replace("|", "/") for cell in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.reliability", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny counts, seconds per server (checks mechanics)")
    parser.add_argument("--servers", default="rush,uvicorn,gunicorn,granian", help="comma-separated")
    parser.add_argument("--scenarios", default=",".join(s.key for s in SCENARIOS), help="comma-separated")
    parser.add_argument("--venv", type=Path, default=REPO_ROOT / ".venv", help="where rush, uvicorn, gunicorn are")
    parser.add_argument("--granian", type=Path, help="the granian program (default: the venv's, or .venv-bench's)")
    parser.add_argument("--json", type=Path, help="also write every result here")
    parser.add_argument("--logs", type=Path, help="server logs go here (default: a temporary directory)")
    args = parser.parse_args(argv)

    sizes = QUICK if args.quick else FULL
    # A SIGTERM (or Ctrl-C) unwinds through each scenario's `finally`, which stops its server.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    limit = raise_open_files()
    if sizes.idle + 1000 > limit:
        print(f"the open-file hard limit ({limit}) is too low for {sizes.idle} connections", file=sys.stderr)
        return 2
    chosen = [name.strip() for name in args.servers.split(",") if name.strip()]
    wanted = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    known = {peer.name: peer for peer in peers(args.venv, args.granian)}
    unknown = [name for name in chosen if name not in known] + [
        key for key in wanted if key not in {s.key for s in SCENARIOS}
    ]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    log_dir = args.logs or Path(os.environ.get("TMPDIR", "/tmp")) / f"rush-reliability-{os.getpid()}"
    log_dir.mkdir(parents=True, exist_ok=True)

    results: dict[str, dict[str, dict]] = {}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for name in chosen:
        peer = known[name]
        results[name] = {}
        missing = peer.missing()
        for scenario in SCENARIOS:
            if scenario.key not in wanted:
                continue
            if missing:
                results[name][scenario.key] = {"cell": f"not installed ({missing})", "error": True}
                continue
            print(f"== {name}: {scenario.title}", file=sys.stderr, flush=True)
            results[name][scenario.key] = run_one(peer, scenario, sizes, log_dir)
            print(f"   {results[name][scenario.key]['cell']}", file=sys.stderr, flush=True)

    print(f"Measured {started} ({'quick' if args.quick else 'full'} mode); servers' logs in {log_dir}")
    print()
    print(table(results, chosen, sizes))
    if args.json:
        args.json.write_text(json.dumps({"started": started, "quick": args.quick, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
