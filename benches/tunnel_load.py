"""A load generator for CONNECT tunnels, which wrk cannot open.

    python benches/tunnel_load.py --proxy HOST:PORT --target http://ORIGIN:PORT/PATH
        [--connections 100] [--duration 10] [--tunnel-per-request] [--sha256 HEX] [--check]

Each of ``--connections`` clients opens a tunnel through the proxy with
``CONNECT ORIGIN:PORT`` (a 200 is required), then sends ``GET PATH`` through
it again and again on one keep-alive connection, reading each response
(Content-Length framing) and checking its status is 2xx and, with
``--sha256``, its body's digest. With ``--tunnel-per-request`` every request
gets a tunnel of its own (CONNECT, GET with ``Connection: close``, close).
The requests are plain HTTP inside the tunnel: what is measured is the
proxy's tunnel set-up and relay, not TLS.

It prints its report in wrk's format (the lines `benches.wrk.parse_wrk_output`
reads: requests, duration, bytes read, latency percentiles, socket errors,
error responses; a wrong body counts as an error response), so the runner
judges it exactly as it judges wrk. ``--check`` sends one request and exits
0 if the answer is right, 1 (with the reason) if not. Standard library only
(uvloop when installed), so any interpreter runs it. It is Python: on a fast
proxy it saturates its core first, which the results mark.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import time
from urllib.parse import urlsplit


class Failure(Exception):
    """A wrong answer (status, body) or a broken tunnel."""


class Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.bad_responses = 0
        self.bytes_read = 0
        self.errors = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
        self.latencies: list[float] = []


async def open_tunnel(proxy: tuple[str, int], authority: str, stats: Stats | None) -> tuple:
    try:
        reader, writer = await asyncio.open_connection(*proxy)
    except OSError:
        if stats is not None:
            stats.errors["connect"] += 1
        raise
    writer.write(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    if stats is not None:
        stats.bytes_read += len(head)
    if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
        writer.close()
        raise Failure(f"CONNECT answered {head.splitlines()[0]!r}")
    return reader, writer


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> tuple[int, bytes, int]:
    """One request on the tunnel; returns (status, body, bytes read)."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length)
    return status, body, len(head) + length


def judge(status: int, body: bytes, sha256: str | None) -> str | None:
    if not 200 <= status < 300:
        return f"status {status}"
    if sha256 is not None and hashlib.sha256(body).hexdigest() != sha256:
        return f"a body of {len(body)} bytes with another SHA-256"
    return None


async def client(arguments: argparse.Namespace, stats: Stats, stop_at: float) -> None:
    target = urlsplit(arguments.target)
    authority, path = target.netloc, target.path or "/"
    keep_alive = f"GET {path} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode()
    closing = f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n".encode()
    tunnel = None
    while time.monotonic() < stop_at:
        started = time.monotonic()
        try:
            if tunnel is None:
                tunnel = await open_tunnel(arguments.proxy, authority, stats)
            reader, writer = tunnel
            request = closing if arguments.tunnel_per_request else keep_alive
            status, body, read = await exchange(reader, writer, request)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, Failure):
            stats.errors["read"] += 1
            if tunnel is not None:
                tunnel[1].close()
            tunnel = None
            continue
        stats.latencies.append(time.monotonic() - started)
        stats.requests += 1
        stats.bytes_read += read
        if judge(status, body, arguments.sha256) is not None:
            stats.bad_responses += 1
        if arguments.tunnel_per_request:
            tunnel[1].close()
            tunnel = None
    if tunnel is not None:
        tunnel[1].close()


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))] if sorted_values else 0.0


def report(stats: Stats, elapsed: float, arguments: argparse.Namespace) -> str:
    latencies = sorted(stats.latencies)
    lines = [
        f"Running {elapsed:.0f}s test @ {arguments.target} through {arguments.proxy[0]}:{arguments.proxy[1]}",
        f"  {arguments.connections} tunnels{' (one per request)' if arguments.tunnel_per_request else ''}",
        "  Latency Distribution",
    ]
    for percent in (50, 75, 90, 99):
        lines.append(f"     {percent}%    {percentile(latencies, percent / 100) * 1000:.2f}ms")
    errors = stats.errors
    lines += [
        f"  {stats.requests} requests in {elapsed:.2f}s, {stats.bytes_read / 1024**2:.2f}MB read",
        f"  Socket errors: connect {errors['connect']}, read {errors['read']}, write {errors['write']}, "
        f"timeout {errors['timeout']}",
        f"  Non-2xx or 3xx responses: {stats.bad_responses}",
        f"Requests/sec: {stats.requests / elapsed if elapsed else 0:.2f}",
        f"Transfer/sec: {stats.bytes_read / elapsed / 1024**2 if elapsed else 0:.2f}MB",
    ]
    return "\n".join(lines)


async def check(arguments: argparse.Namespace) -> str | None:
    """One request through a fresh tunnel; the problem, or None when the answer is right."""
    target = urlsplit(arguments.target)
    try:
        reader, writer = await open_tunnel(arguments.proxy, target.netloc, None)
        request = f"GET {target.path or '/'} HTTP/1.1\r\nHost: {target.netloc}\r\n\r\n".encode()
        status, body, _ = await asyncio.wait_for(exchange(reader, writer, request), 5)
        writer.close()
    except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, Failure) as error:
        return f"tunnel request failed: {error!r}"
    return judge(status, body, arguments.sha256)


async def run(arguments: argparse.Namespace) -> int:
    if arguments.check:
        problem = await check(arguments)
        if problem:
            print(problem, file=sys.stderr)
            return 1
        return 0
    stats = Stats()
    started = time.monotonic()
    stop_at = started + arguments.duration
    await asyncio.gather(*(client(arguments, stats, stop_at) for _ in range(arguments.connections)))
    print(report(stats, time.monotonic() - started, arguments))
    return 0


def address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxy", type=address, required=True, help="HOST:PORT of the proxy")
    parser.add_argument("--target", required=True, help="http://ORIGIN:PORT/PATH to fetch through each tunnel")
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--tunnel-per-request", action="store_true")
    parser.add_argument("--sha256", help="the SHA-256 every body must have")
    parser.add_argument("--check", action="store_true", help="one request; exit status says if it was right")
    arguments = parser.parse_args()
    try:
        import uvloop
    except ImportError:
        return asyncio.run(run(arguments))
    return uvloop.run(run(arguments))


if __name__ == "__main__":
    sys.exit(main())
