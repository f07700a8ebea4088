"""Worker memory per idle HTTP/1.1 keep-alive connection (issue 25's 0.4 KiB target), and
per idle CONNECT tunnel of `rush proxy`.

    python -m benches.idle_memory                 # rush as built in .venv, 10,000 connections
    python -m benches.idle_memory --baseline      # benches/.tools/rush-baseline, the same way
    python -m benches.idle_memory --connections 5000
    python -m benches.idle_memory --tunnels       # rush proxy, 10,000 idle tunnels

One rush worker serves the hello App (benches/apps/rush_app.py) with a long
keep-alive timeout. 200 warm-up connections make one request each and stay
open; the worker's VmRSS is read; then N more connections each make one
request (every answer is checked to be ``Hello, World!``), read it and stay
open. After 2.5 s (so that the worker's once-a-second sweep has found them
idle: rush gives an idle connection's buffers back there) VmRSS is read
again, and the growth divided by N is printed.

``--tunnels``: one `rush proxy` worker, and a rush hello server as the origin
(its own process, not counted). Each of N clients sends ``CONNECT`` to the
origin, reads the ``200``, asks ``GET /`` through the tunnel (checked to be
``Hello, World!``) and stays open; the proxy worker's RSS growth per tunnel
is printed, measured the same way. A tunnel takes two descriptors in the
proxy, so 10,000 tunnels need more than this machine's usual hard limit of
20,000 open files: where it may (CAP_SYS_RESOURCE), the script raises the
hard limit (up to the kernel's `fs.nr_open`) for itself and the servers it
starts; without that right (this machine's root has not), N defaults to
9,000.

Memory, not speed: the
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


# Room for 10,000 tunnels: the proxy holds two descriptors a tunnel, this
# script one, the origin one, each plus the 200 warm-up connections.
WANTED_OPEN_FILES = 32_768


def raise_open_file_limit() -> int:
    """Raises the soft (and, where allowed, the hard) open-file limit, which
    the servers started later inherit; returns the soft limit reached."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = max(hard, min(WANTED_OPEN_FILES, int(Path("/proc/sys/fs/nr_open").read_text())))
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
    except (PermissionError, ValueError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


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
    await ask_hello(reader, writer)
    held.append(writer)


async def open_tunnel(port: int, origin_port: int, held: list[asyncio.StreamWriter]) -> None:
    reader, writer = await asyncio.open_connection(HOST, port)
    origin = f"{HOST}:{origin_port}"
    writer.write(f"CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
    await writer.drain()
    established = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    if not established.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"CONNECT refused: {established[:200]!r}")
    await ask_hello(reader, writer)
    held.append(writer)


async def ask_hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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


async def measure(supervisor: int, port: int, connections: int, origin_port: int | None) -> tuple[int, int, int]:
    held: list[asyncio.StreamWriter] = []
    gate = asyncio.Semaphore(500)

    async def guarded() -> None:
        async with gate:
            if origin_port is None:
                await open_idle(port, held)
            else:
                await open_tunnel(port, origin_port, held)

    await asyncio.gather(*(guarded() for _ in range(200)))
    before = worker_rss_kib(supervisor)
    await asyncio.gather(*(guarded() for _ in range(connections)))
    await asyncio.sleep(2.5)  # two sweeps: the last connections are found idle too
    after = worker_rss_kib(supervisor)
    for writer in held:
        writer.close()
    return before, after, len(held) - 200


def start(arguments: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rush", *arguments, "--log-level", "warning"], env=env, cwd=REPO)


def wait_until_listening(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection((HOST, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--connections", type=int, default=None, help="10,000 (9,000 tunnels where the open-file limit stays at 20,000)"
    )
    parser.add_argument("--baseline", action="store_true", help="measure benches/.tools/rush-baseline instead")
    parser.add_argument("--tunnels", action="store_true", help="idle CONNECT tunnels through rush proxy")
    args = parser.parse_args()
    open_files = raise_open_file_limit()
    connections = args.connections or (9_000 if args.tunnels and open_files < 2 * 10_200 + 100 else 10_000)
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{BASELINE}{os.pathsep}{REPO}" if args.baseline else str(REPO)
    capacity = ["--max-connections", str(connections + 1000)]
    started: list[subprocess.Popen] = []
    try:
        origin_port = None
        if args.tunnels:
            origin_port = free_port()
            origin = ["benches.apps.rush_app:app", "--bind", f"{HOST}:{origin_port}", "--workers", "1"]
            started.append(start([*origin, "--keep-alive-timeout", "600", *capacity], env))
            wait_until_listening(origin_port)
            proxy = ["proxy", "--host", HOST, "--port", str(port), "--workers", "1", "--allow-private"]
            proxy += ["--allow-connect-port", str(origin_port), "--tunnel-idle-timeout", "600", "--no-access-log"]
            started.append(start([*proxy, *capacity], env))
        else:
            hello = ["benches.apps.rush_app:app", "--bind", f"{HOST}:{port}", "--workers", "1"]
            started.append(start([*hello, "--keep-alive-timeout", "600", *capacity], env))
        measured = started[-1]
        wait_until_listening(port)
        before, after, opened = asyncio.run(measure(measured.pid, port, connections, origin_port))
    finally:
        for process in started:
            process.terminate()
            process.wait(timeout=15)
    build = "baseline" if args.baseline else "current"
    what = "idle CONNECT tunnels" if args.tunnels else "idle keep-alive connections"
    print(
        f"{build}: {opened:,} {what}; worker RSS {before:,} -> {after:,} KiB; "
        f"{(after - before) / opened:.3f} KiB per {'tunnel' if args.tunnels else 'connection'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
