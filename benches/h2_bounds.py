"""Issue 32's HTTP/2 bounds, as scenarios with figures rather than timed tests.

    python -m benches.h2_bounds window0 [--budget 8M] [--connections 300] [--streams 100]
    python -m benches.h2_bounds flood [--tls]

``window0``: one rush worker (``taskset -c 0``) serves tests/apps/h2_hostile.py,
whose ``/big`` streams 8 MiB in 64 KiB parts. N raw h2c connections each
announce ``SETTINGS_INITIAL_WINDOW_SIZE 0`` (no response byte may ever
flow), open S streams to ``/big``, and send a PING after them; its ACK says
the server has read every request and started what it would start. Then
the worker's RSS (VmRSS, and the peak VmHWM) is read against its idle
figure, and ``/started`` says how many apps began. The issue's target: RSS
at most idle + ``--max-worker-output`` + 64 MiB. Then every connection
closes at once, and a normal client on a new h2 connection asks ``/pid``
200 times in a row: its p99 (target: under 50 ms) and ``/started`` again
(target: no app began after the close).

``flood``: a normal client's latency over its own h2 connection (400
requests of ``/pid``, one at a time) while it is quiet, then while one
raw connection floods each kind of frame that carries nothing (PING,
SETTINGS, WINDOW_UPDATE, PRIORITY, empty DATA) and reads every answer.
The issue's target: p99 during a flood at most 2x the quiet p99 (floor
50 ms), and the flooding connection ends with GOAWAY(ENHANCE_YOUR_CALM).

The client runs on core 1 (``sched_setaffinity``); every answer is
checked (status 200 and the worker's pid) before a latency counts.
"""

from __future__ import annotations

import argparse
import multiprocessing
import multiprocessing.synchronize
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from h2_raw import (  # noqa: E402 - the raw peer lives with the tests
    END_HEADERS,
    END_STREAM,
    FLOODS,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    PING,
    RawH2,
    frame,
    request_block,
    settings,
)

RUSH = REPO / ".venv" / "bin" / "rush"
APP = "tests.apps.h2_hostile:app"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


class Server:
    """One rush worker on core 0, started for a scenario."""

    def __init__(self, *args: str, tls: dict[str, Path] | None = None) -> None:
        self.port = free_port()
        self.tls = tls
        extra = ["--ssl-certfile", str(tls["chain"]), "--ssl-keyfile", str(tls["key"])] if tls else []
        command = ["taskset", "-c", "0", str(RUSH), APP, "--http", "auto", "--port", str(self.port), *extra, *args]
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(command, cwd=REPO, stdout=self.log, stderr=self.log)
        for _ in range(500):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                time.sleep(0.02)
        with self.client() as client:
            self.pid = int(client.get("/pid").text)

    def context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.tls["ca"])) if self.tls else None

    def client(self) -> httpx.Client:
        scheme = "https" if self.tls else "http"
        return httpx.Client(
            base_url=f"{scheme}://127.0.0.1:{self.port}",
            http2=True,
            http1=False,
            verify=self.context() or False,
            timeout=30,
        )

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def latencies(client: httpx.Client, pid: int, count: int) -> list[float]:
    """``count`` requests of /pid one after the other, each checked; seconds each."""
    taken = []
    for _ in range(count):
        start = time.perf_counter()
        answer = client.get("/pid")
        taken.append(time.perf_counter() - start)
        if answer.status_code != 200 or int(answer.text) != pid or answer.http_version != "HTTP/2":
            raise RuntimeError(f"a wrong answer: {answer} {answer.text!r}")
    return taken


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]


def window0(args: argparse.Namespace) -> None:
    flags = ["--max-worker-output", args.budget] if args.budget else []
    server = Server(*flags)
    try:
        with server.client() as client:
            idle_rss = status_kib(server.pid, "VmRSS")
            block = request_block(args.path)
            requests = b"".join(frame(HEADERS, END_HEADERS | END_STREAM, 2 * i + 1, block) for i in range(args.streams))
            connections = []
            for _ in range(args.connections):
                raw = RawH2(server.port, settings((INITIAL_WINDOW_SIZE, 0)))
                raw.send(requests + frame(PING, 0, 0, b"synced!!"))
                connections.append(raw)
            for raw in connections:
                while (got := raw.read_frame()) is not None and not (got.kind == PING and got.payload == b"synced!!"):
                    pass
                if got is None:
                    raise RuntimeError("a connection closed before its PING was answered")
            rss, peak = status_kib(server.pid, "VmRSS"), status_kib(server.pid, "VmHWM")
            began = int(client.get("/started").text)
            closed_at = time.perf_counter()
            for raw in connections:
                raw.close()
            after = latencies(client, server.pid, 200)
            began_after = int(client.get("/started").text)
        budget = args.budget or "64M (default)"
        print(
            f"window0: {args.connections} connections x {args.streams} streams, --max-worker-output {budget}\n"
            f"  worker RSS idle {idle_rss / 1024:.1f} MiB, loaded {rss / 1024:.1f} MiB"
            f" (growth {(rss - idle_rss) / 1024:.1f} MiB), peak {peak / 1024:.1f} MiB\n"
            f"  apps begun: {began} of {args.connections * args.streams} streams; after the close: {began_after}\n"
            f"  after the close: normal client p99 {p99(after) * 1000:.1f} ms, max {max(after) * 1000:.1f} ms,"
            f" first answer {(after[0]) * 1000:.1f} ms ({(time.perf_counter() - closed_at):.2f} s for all 200)"
        )
    finally:
        server.stop()


def flood_one(
    server: Server, kind: str, stop: multiprocessing.synchronize.Event, results: multiprocessing.Queue
) -> None:
    """Floods ``kind`` from one raw connection, reading every answer, until
    GOAWAY or ``stop``; puts the bytes sent and the GOAWAY's code on
    ``results``. Run in a process of its own: in a thread, its reading of
    every answer in Python held the interpreter lock the normal client's
    thread waited on, and its latency measured that."""
    raw = RawH2(server.port, tls=server.context())
    if kind == "empty DATA":
        raw.send(frame(HEADERS, END_HEADERS, 1, request_block("/drain", "POST")))
    sent, frames = raw.flood_until_goaway(FLOODS[kind], stop=stop.is_set)
    goaway = next((got.error_code for got in frames if got.kind == GOAWAY), "none")
    raw.close()
    results.put({"sent": sent, "goaway": goaway})


def flood(args: argparse.Namespace) -> None:
    tls = None
    if args.tls:
        from support import write_localhost_pki

        tls = write_localhost_pki(Path(tempfile.mkdtemp()))
    server = Server(tls=tls)
    try:
        with server.client() as client:
            latencies(client, server.pid, 50)  # warm-up
            quiet = latencies(client, server.pid, args.requests)
            print(f"flood over {'TLS' if tls else 'h2c'}: quiet p99 {p99(quiet) * 1000:.2f} ms")
            processes = multiprocessing.get_context("fork")
            for kind in FLOODS:
                stop, results = processes.Event(), processes.Queue()
                flooder = processes.Process(target=flood_one, args=(server, kind, stop, results), daemon=True)
                flooder.start()
                during = []
                # Requests only while the flood runs (it ends with its GOAWAY).
                while flooder.is_alive() and len(during) < args.requests:
                    during += latencies(client, server.pid, 1)
                stop.set()
                result = results.get(timeout=30)
                flooder.join(30)
                figure = f"p99 {p99(during) * 1000:.2f} ms over {len(during)}" if len(during) >= 2 else "no request"
                print(
                    f"  {kind:14} {figure}; flood {result.get('sent', 0) / 2**20:.1f} MiB,"
                    f" GOAWAY code {result.get('goaway', 'none')}"
                )
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="scenario", required=True)
    w = sub.add_parser("window0")
    w.add_argument("--budget", default="", help="--max-worker-output (default: rush's)")
    w.add_argument("--connections", type=int, default=300)
    w.add_argument("--streams", type=int, default=100)
    w.add_argument("--path", default=f"/big?size={8 << 20}", help="what each stream asks for")
    f = sub.add_parser("flood")
    f.add_argument("--tls", action="store_true")
    f.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})
    {"window0": window0, "flood": flood}[args.scenario](args)


if __name__ == "__main__":
    main()
