"""Worker memory per idle HTTP/1.1 keep-alive connection (issue 25's 0.4 KiB target).

    python -m benches.idle_memory                 # rush as built in .venv, 10,000 connections
    python -m benches.idle_memory --baseline      # benches/.tools/rush-baseline, the same way
    python -m benches.idle_memory --connections 5000

One rush worker serves the hello App (benches/apps/rush_app.py) with a long
keep-alive timeout. 200 warm-up connections make one request each and stay
open; the worker's VmRSS is read; then N more connections each make one
request (every answer is checked to be ``Hello, World!``), read it and stay
open. After 2.5 s (so that the worker's once-a-second sweep has found them
idle: rush gives an idle connection's buffers back there) VmRSS is read
again, and the growth divided by N is printed. Memory, not speed: the
figure does not depend on the machine's load, but on the allocator, so it is
compared against the baseline build in the same way, not against a peer.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"
HELLO = b"Hello, World!"
REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "benches" / ".tools" / "rush-baseline"


def raise_open_file_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def worker_rss_kib(supervisor: int) -> int:
    children = subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True, text=True).stdout.split()
    if len(children) != 1:
        raise RuntimeError(f"expected one worker under {supervisor}, found {children}")
    status = Path(f"/proc/{children[0]}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))


async def open_idle(port: int, held: list[asyncio.StreamWriter]) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    writer.write(b"GET / HTTP/1.1\r\nHost: idle-memory\r\n\r\n")
    await writer.drain()
    received = b""
    while HELLO not in received:
        chunk = await asyncio.wait_for(reader.read(4096), 10)
        if not chunk:
            raise RuntimeError(f"connection closed before the answer: {received[:200]!r}")
        received += chunk
    if not received.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"unexpected answer: {received[:200]!r}")
    held.append(writer)


async def measure(supervisor: int, port: int, connections: int) -> tuple[int, int, int]:
    held: list[asyncio.StreamWriter] = []
    gate = asyncio.Semaphore(500)

    async def guarded() -> None:
        async with gate:
            await open_idle(port, held)

    await asyncio.gather(*(guarded() for _ in range(200)))
    before = worker_rss_kib(supervisor)
    await asyncio.gather(*(guarded() for _ in range(connections)))
    await asyncio.sleep(2.5)  # two sweeps: the last connections are found idle too
    after = worker_rss_kib(supervisor)
    for writer in held:
        writer.close()
    return before, after, len(held) - 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--baseline", action="store_true", help="measure benches/.tools/rush-baseline instead")
    args = parser.parse_args()
    raise_open_file_limit()
    port = free_port()
    env = dict(os.environ)
    if args.baseline:
        env["PYTHONPATH"] = f"{BASELINE}{os.pathsep}{REPO}"
    else:
        env["PYTHONPATH"] = str(REPO)
    command = [sys.executable, "-m", "rush", "benches.apps.rush_app:app", "--bind", f"{HOST}:{port}"]
    command += ["--workers", "1", "--keep-alive-timeout", "600", "--max-connections", str(args.connections + 1000)]
    command += ["--log-level", "warning"]
    server = subprocess.Popen(command, env=env, cwd=REPO)
    try:
        for _ in range(200):
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        before, after, opened = asyncio.run(measure(server.pid, port, args.connections))
    finally:
        server.terminate()
        server.wait(timeout=15)
    build = "baseline" if args.baseline else "current"
    print(
        f"{build}: {opened:,} idle keep-alive connections; worker RSS {before:,} -> {after:,} KiB; "
        f"{(after - before) / opened:.3f} KiB per idle connection"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
