"""The hostile clients: ``python -m soak.hostile PORTS_FILE OUT_FILE``.

Against every server, until the deadline in PORTS_FILE:

* slowloris: `SLOWLORIS_CONNECTIONS` connections at a time, each dripping a
  request head one byte per second (the head is far longer than the header
  timeout lets through);
* oversize: a head over ``--max-head-size`` (many headers, or one huge one);
* half-close: a complete request, then ``shutdown(SHUT_WR)``;
* reset mid-request: part of a head, or a head and part of a declared body,
  then ``SO_LINGER`` 0 and close (an RST);
* reset mid-response: a large response, 64 KiB of it read, then an RST;
* never-read: a large response on a tiny receive buffer, never read for
  longer than the server's send timeout, then drained to see what is left.

None of this counts as a failure of the server; each attempt's outcome (what
the client got: a status, a close, a reset, nothing) is counted per server
and scenario, and written to OUT_FILE like soak.wellformed does.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable

from soak.plan import (
    CONNECT_TIMEOUT,
    HALF_CLOSE_INTERVAL,
    HOST,
    HOSTILE_READ_LIMIT,
    MAX_HEAD_SIZE,
    NEVER_READ_CONNECTIONS,
    NEVER_READ_HOLD,
    NEVER_READ_RCVBUF,
    OVERSIZE_INTERVAL,
    RESET_REQUEST_INTERVAL,
    RESET_RESPONSE_INTERVAL,
    SLOWLORIS_CONNECTIONS,
    SLOWLORIS_GIVE_UP,
    large_targets,
    read_ports,
)
from soak.wellformed import write_json

SNAPSHOT_INTERVAL = 5.0
MID_RESPONSE_BYTES = 64 * 1024
CUT_SHORT = "cut short by the end of the run"

Outcomes = dict[str, dict[str, Counter[str]]]  # server -> scenario -> outcome -> count


def status_of(data: bytes) -> str | None:
    if data.startswith(b"HTTP/1.") and len(data) >= 12 and data[9:12].isdigit():
        return data[9:12].decode()
    return None


def describe(data: bytes, end: str) -> str:
    """An outcome: the status that arrived (if any) and how the connection ended."""
    status = status_of(data)
    if status is not None:
        return f"got {status}, then {end}"
    if data:
        return f"got {len(data)} bytes that are not a response, then {end}"
    return f"no response, {end}"


async def connect(port: int, rcvbuf: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            await asyncio.get_running_loop().sock_connect(sock, (HOST, port))
    except BaseException:
        sock.close()
        raise
    return sock


def close_with_reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


async def read_until_close(sock: socket.socket, limit: float, stop_after: int | None = None) -> tuple[bytes, str]:
    """Reads until the server closes (``"closed"``), resets (``"reset"``), ``limit``
    seconds pass (``"still open after Ns"``) or ``stop_after`` bytes arrived (``"read enough"``)."""
    loop = asyncio.get_running_loop()
    data = bytearray()
    try:
        async with asyncio.timeout(limit):
            while True:
                piece = await loop.sock_recv(sock, 65536)
                if not piece:
                    return bytes(data), "closed"
                data += piece
                if stop_after is not None and len(data) >= stop_after:
                    return bytes(data), "read enough"
    except ConnectionResetError:
        return bytes(data), "reset"
    except TimeoutError:
        return bytes(data), f"still open after {limit:g}s"


async def send_all(sock: socket.socket, data: bytes) -> str | None:
    """Sends ``data``; None, or what stopped it."""
    try:
        async with asyncio.timeout(HOSTILE_READ_LIMIT):
            await asyncio.get_running_loop().sock_sendall(sock, data)
    except (ConnectionResetError, BrokenPipeError):
        return "reset while sending"
    except TimeoutError:
        return "send blocked"
    return None


# ---------------------------------------------------------------------------
# One attempt of each kind: returns its outcome


async def slowloris(port: int) -> str:
    loop = asyncio.get_running_loop()
    head = b"GET / HTTP/1.1\r\nHost: soak\r\nX-Drip: " + b"d" * 400 + b"\r\n\r\n"
    sock = await connect(port)
    try:
        started = time.monotonic()
        for index in range(len(head)):
            if time.monotonic() - started > SLOWLORIS_GIVE_UP:
                return f"never timed out by the server (gave up after {SLOWLORIS_GIVE_UP:g}s)"
            stopped = await send_all(sock, head[index : index + 1])
            if stopped is not None:
                data, end = await read_until_close(sock, 1.0)
                return describe(data, f"{stopped}, {end}")
            try:
                first = await asyncio.wait_for(loop.sock_recv(sock, 65536), 1.0)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return "no response, reset"
            if not first:
                return f"no response, closed after {time.monotonic() - started:.0f}s"
            rest, end = await read_until_close(sock, HOSTILE_READ_LIMIT)
            return describe(first + rest, end)
        return "the whole head went through"
    finally:
        sock.close()


async def oversize(port: int, variant: int) -> str:
    if variant % 2 == 0:
        fillers = "".join(f"X-Filler-{index:02d}: {'f' * 400}\r\n" for index in range(MAX_HEAD_SIZE // 400 + 8))
    else:
        fillers = f"X-Huge: {'h' * (MAX_HEAD_SIZE + 1024)}\r\n"
    data = f"GET / HTTP/1.1\r\nHost: soak\r\n{fillers}\r\n".encode()
    sock = await connect(port)
    try:
        stopped = await send_all(sock, data)
        received, end = await read_until_close(sock, HOSTILE_READ_LIMIT)
        return describe(received, end if stopped is None else f"{stopped}, {end}")
    finally:
        sock.close()


async def half_close(port: int) -> str:
    sock = await connect(port)
    try:
        stopped = await send_all(sock, b"GET / HTTP/1.1\r\nHost: soak\r\n\r\n")
        if stopped is None:
            sock.shutdown(socket.SHUT_WR)
        received, end = await read_until_close(sock, HOSTILE_READ_LIMIT)
        return describe(received, end if stopped is None else f"{stopped}, {end}")
    finally:
        sock.close()


async def reset_mid_request(port: int, variant: int) -> str:
    if variant % 2 == 0:
        data, what = b"GET / HTTP/1.1\r\nHost: soak\r\nX-Partial: abc", "head"
    else:
        data = b"POST /echo HTTP/1.1\r\nHost: soak\r\nContent-Length: 65536\r\n\r\n" + b"b" * 1000
        what = "body"
    sock = await connect(port)
    try:
        stopped = await send_all(sock, data)
        await asyncio.sleep(0.1)
        try:
            early = sock.recv(65536)
        except BlockingIOError:
            early = None
        except ConnectionResetError:
            return f"reset by the server before the client's reset (mid-{what})"
    finally:
        close_with_reset(sock)
    if stopped is not None:
        return f"{stopped} (mid-{what})"
    if early is None:
        return f"reset sent mid-{what}"
    return f"{describe(early, 'closed' if early == b'' else 'open')} before the reset (mid-{what})"


async def reset_mid_response(port: int, target: str) -> str:
    sock = await connect(port)
    try:
        stopped = await send_all(sock, f"GET {target} HTTP/1.1\r\nHost: soak\r\n\r\n".encode())
        if stopped is not None:
            return stopped
        data, end = await read_until_close(sock, HOSTILE_READ_LIMIT, stop_after=MID_RESPONSE_BYTES)
    finally:
        close_with_reset(sock)
    if end == "read enough":
        return f"reset sent after {MID_RESPONSE_BYTES // 1024} KiB of a {status_of(data)}"
    return describe(data, end)


async def never_read(port: int, target: str, size: int, deadline: float) -> str:
    sock = await connect(port, rcvbuf=NEVER_READ_RCVBUF)
    try:
        stopped = await send_all(sock, f"GET {target} HTTP/1.1\r\nHost: soak\r\n\r\n".encode())
        if stopped is not None:
            return stopped
        hold = min(NEVER_READ_HOLD, deadline - time.time())
        if hold < NEVER_READ_HOLD:
            await asyncio.sleep(max(hold, 0))
            return CUT_SHORT
        await asyncio.sleep(hold)
        data, end = await read_until_close(sock, 10.0)
    finally:
        sock.close()
    head_end = data.find(b"\r\n\r\n")
    body = len(data) - head_end - 4 if head_end >= 0 else 0
    if body >= size:
        return f"whole body read after the {NEVER_READ_HOLD:g}s hold, then {end} (the server did not time it out)"
    if status_of(data) is None:
        return describe(data, end)
    return f"got {status_of(data)}, {100 * body // size}%-ish of the body, then {end}"


# ---------------------------------------------------------------------------
# The loops


async def repeat(
    server: str,
    scenario: str,
    attempt: Callable[[int], Awaitable[str]],
    interval: float,
    deadline: float,
    outcomes: Outcomes,
) -> None:
    """Runs ``attempt(n)`` every ``interval`` seconds (or back to back when it
    takes longer) until the deadline, counting each outcome."""
    loop = asyncio.get_running_loop()
    number = 0
    next_at = loop.time()
    while time.time() < deadline:
        try:
            async with asyncio.timeout(max(deadline - time.time(), 0) + 2.0):
                outcome = await attempt(number)
        except TimeoutError:
            outcome = CUT_SHORT
        except ConnectionRefusedError:
            outcome = "connection refused"
        except OSError as error:
            outcome = f"{type(error).__name__}: {error.strerror or error}"
        outcomes[server][scenario][outcome] += 1
        number += 1
        next_at = max(next_at + interval, loop.time())
        await asyncio.sleep(next_at - loop.time())


async def snapshots(outcomes: Outcomes, path: str, deadline: float) -> None:
    while time.time() < deadline:
        await asyncio.sleep(SNAPSHOT_INTERVAL)
        write_json(path, snapshot(outcomes, finished=False))


def snapshot(outcomes: Outcomes, finished: bool) -> dict:
    return {
        "finished": finished,
        "outcomes": {
            server: {scenario: dict(counts) for scenario, counts in scenarios.items()}
            for server, scenarios in outcomes.items()
        },
    }


async def run(ports_file: str, out_file: str) -> None:
    config = read_ports(ports_file)
    deadline = config["deadline"]
    outcomes: Outcomes = defaultdict(lambda: defaultdict(Counter))
    tasks = []
    for server, port in config["ports"].items():
        targets = large_targets(server)

        def loop_of(scenario: str, attempt: Callable[[int], Awaitable[str]], interval: float) -> Awaitable[None]:
            return repeat(server, scenario, attempt, interval, deadline, outcomes)  # noqa: B023 - called at once

        for _ in range(SLOWLORIS_CONNECTIONS):
            tasks.append(loop_of("slowloris", lambda n, p=port: slowloris(p), 0.5))
        tasks.append(loop_of("oversize head", lambda n, p=port: oversize(p, n), OVERSIZE_INTERVAL))
        tasks.append(loop_of("half-close", lambda n, p=port: half_close(p), HALF_CLOSE_INTERVAL))
        tasks.append(loop_of("reset mid-request", lambda n, p=port: reset_mid_request(p, n), RESET_REQUEST_INTERVAL))
        tasks.append(
            loop_of(
                "reset mid-response",
                lambda n, p=port, t=targets: reset_mid_response(p, t[n % len(t)][0]),
                RESET_RESPONSE_INTERVAL,
            )
        )
        for index in range(NEVER_READ_CONNECTIONS):
            tasks.append(
                loop_of(
                    "never-read",
                    lambda n, p=port, t=targets, i=index: never_read(p, *t[(n + i) % len(t)], deadline),
                    1.0,
                )
            )
    reporter = asyncio.ensure_future(snapshots(outcomes, out_file, deadline))
    await asyncio.gather(*tasks)
    reporter.cancel()
    write_json(out_file, snapshot(outcomes, finished=True))


def main() -> None:
    asyncio.run(run(sys.argv[1], sys.argv[2]))


if __name__ == "__main__":
    main()
