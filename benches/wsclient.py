"""The websocket group's Python client: answers checked before and after timing, and the idle
connections whose memory the idle scenarios measure. The load itself is benches/rust's ws-load.

**Checks** (`check`, called by the runner like `benches.httpcheck.check_scenario`), with the
``websockets`` client (rush's venv has it), every message random bytes of the scenario's size:

* echo: three binary messages on one connection, each answered with the same bytes, as binary;
* broadcast: three members join; the first sends probes until every member has received one
  (a server may add a member to its group just after the handshake), the probes are drained,
  then three messages must each reach every member, the sender included, in order, byte for byte.

**Idle connections** (``python -m benches.wsclient idle --url ws://H:P/echo --connections N
[--deflate]``), a line protocol with the runner on stdin and stdout:

1. opens ``--warm`` connections (10), each echoing one 20-byte message; prints ``warm``;
2. waits for a line on stdin (the runner reads the server's RSS meanwhile);
3. opens ``--connections`` more, each echoing one 20-byte message (so permessage-deflate's
   contexts, where negotiated, have been used both ways), at most 64 handshakes at a time;
   prints ``ready N DEFLATED``;
4. waits for stdin to close (the runner reads the RSS again), closes everything, and prints a
   JSON line: ``{"ok": ..., "connections": N, "deflated": K, "errors": [...]}``.

With ``--deflate`` each connection offers permessage-deflate, and a connection the server does
not compress is an error (the server declines it); without, none offers it. Any wrong echo or
failed handshake makes ``ok`` false and the exit status 1. Bounded: every step times out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from contextlib import ExitStack
from typing import Any

TIMEOUT_S = 10.0
CHECK_MESSAGES = 3
BROADCAST_CHECK_MEMBERS = 3


class WsCheckFailed(Exception):
    """A wrong or missing answer."""


def _payload(size: int) -> bytes:
    return os.urandom(size)


def _receive(connection: Any, timeout: float = TIMEOUT_S) -> bytes | str:
    return connection.recv(timeout=timeout)


def check_echo(url: str, size: int) -> None:
    from websockets.sync.client import connect

    with connect(url, compression=None, max_size=None, open_timeout=TIMEOUT_S) as connection:
        for index in range(CHECK_MESSAGES):
            sent = _payload(size)
            connection.send(sent)
            answer = _receive(connection)
            if not isinstance(answer, bytes):
                raise WsCheckFailed(f"{url}: message {index + 1} echoed as text, sent as binary")
            if answer != sent:
                raise WsCheckFailed(f"{url}: message {index + 1} ({size} bytes) echoed as {len(answer)} other bytes")


def check_broadcast(url: str, size: int, members: int = BROADCAST_CHECK_MEMBERS) -> None:
    from websockets.sync.client import connect

    with ExitStack() as stack:
        connections = [
            stack.enter_context(connect(url, compression=None, max_size=None, open_timeout=TIMEOUT_S))
            for _ in range(members)
        ]
        sender = connections[0]
        joined: set[int] = set()
        deadline = time.monotonic() + TIMEOUT_S
        while len(joined) < members:
            if time.monotonic() > deadline:
                raise WsCheckFailed(f"{url}: {members - len(joined)} of {members} members never got a probe")
            sender.send(b"probe")
            for index, connection in enumerate(connections):
                try:
                    _receive(connection, 0.2)
                    joined.add(index)
                except TimeoutError:
                    pass
        for connection in connections:  # the probes still on their way
            while True:
                try:
                    _receive(connection, 0.3)
                except TimeoutError:
                    break
        sent = [_payload(size) for _ in range(CHECK_MESSAGES)]
        for message in sent:
            sender.send(message)
        for index, connection in enumerate(connections):
            for number, message in enumerate(sent):
                try:
                    answer = _receive(connection)
                except TimeoutError:
                    raise WsCheckFailed(f"{url}: member {index} did not get message {number + 1}") from None
                if answer != message:
                    raise WsCheckFailed(f"{url}: member {index} got other bytes for message {number + 1}")


def check(url: str, mode: str, size: int) -> None:
    """Raises WsCheckFailed when the endpoint answers wrong, or not at all."""
    from websockets.exceptions import WebSocketException

    try:
        if mode == "broadcast":
            check_broadcast(url, size)
        else:
            check_echo(url, size)
    except (WebSocketException, OSError, TimeoutError) as error:
        raise WsCheckFailed(f"{url}: {type(error).__name__}: {error}") from error


# --- idle connections -----------------------------------------------------------------------------


async def _open(url: str, deflate: bool, gate: asyncio.Semaphore, errors: list[str]) -> tuple[Any, bool] | None:
    from websockets.asyncio.client import connect

    async with gate:
        try:
            connection = await connect(
                url,
                compression="deflate" if deflate else None,
                ping_interval=None,
                open_timeout=TIMEOUT_S,
                max_size=None,
            )
            sent = _payload(20)
            await connection.send(sent)
            answer = await asyncio.wait_for(connection.recv(), TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - any failure is reported, never raised
            if len(errors) < 5:
                errors.append(f"{type(error).__name__}: {error}")
            return None
        if answer != sent:
            errors.append("an echo with other bytes")
            await connection.close()
            return None
        extensions = connection.response.headers.get("Sec-WebSocket-Extensions", "") if connection.response else ""
        return connection, "permessage-deflate" in extensions


async def _open_many(url: str, count: int, deflate: bool, errors: list[str]) -> list[tuple[Any, bool]]:
    gate = asyncio.Semaphore(64)
    opened = await asyncio.gather(*(_open(url, deflate, gate, errors) for _ in range(count)))
    if len(opened) - sum(item is not None for item in opened) and not errors:
        errors.append("a connection failed")
    return [item for item in opened if item is not None]


async def _wait_for_line(timeout: float) -> str:
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), timeout)


async def idle(url: str, connections: int, warm: int, deflate: bool, hold_s: float) -> int:
    errors: list[str] = []
    held = await _open_many(url, warm, deflate, errors)
    print("warm", flush=True)
    await _wait_for_line(hold_s)
    held += await _open_many(url, connections, deflate, errors)
    deflated = sum(compressed for _, compressed in held)
    print(f"ready {len(held)} {deflated}", flush=True)
    await _wait_for_line(hold_s)  # EOF when the runner closes stdin
    if deflate and deflated < len(held):
        errors.append(f"the server compressed {deflated} of {len(held)} connections (it declines permessage-deflate)")
    if not deflate and deflated:
        errors.append(f"{deflated} connections compressed though none offered permessage-deflate")
    await asyncio.gather(*(connection.close() for connection, _ in held), return_exceptions=True)
    ok = not errors and len(held) == warm + connections
    print(json.dumps({"ok": ok, "connections": len(held) - warm, "deflated": deflated, "errors": errors}), flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.wsclient", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    checking = commands.add_parser("check", help="check one endpoint's answers (exit status 1 if wrong)")
    checking.add_argument("--url", required=True)
    checking.add_argument("--mode", choices=("echo", "broadcast"), default="echo")
    checking.add_argument("--size", type=int, default=20)
    holding = commands.add_parser("idle", help="hold idle connections for the runner (line protocol above)")
    holding.add_argument("--url", required=True)
    holding.add_argument("--connections", type=int, default=1000)
    holding.add_argument("--warm", type=int, default=10)
    holding.add_argument("--deflate", action="store_true")
    holding.add_argument("--hold", type=float, default=60.0, help="longest wait for the runner, in seconds")
    arguments = parser.parse_args(argv)
    if arguments.command == "check":
        try:
            check(arguments.url, arguments.mode, arguments.size)
        except WsCheckFailed as error:
            print(f"wrong: {error}", file=sys.stderr)
            return 1
        print("ok")
        return 0
    try:
        import uvloop
    except ImportError:
        runner = asyncio.run
    else:
        runner = uvloop.run
    return runner(idle(arguments.url, arguments.connections, arguments.warm, arguments.deflate, arguments.hold))


if __name__ == "__main__":
    sys.exit(main())
