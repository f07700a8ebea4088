"""Helpers for the WebSocket tests: a `websockets` client run to completion
(``run``), and a raw client for what a library would not send or would
read for us: handshakes built by hand and frames read one by one."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import struct
import urllib.request
from collections.abc import Coroutine
from typing import Any

from support import GUARD_TIMEOUT, Connection, RushServer


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Runs a client coroutine, failing (not hanging) if the server stalls."""
    return asyncio.run(asyncio.wait_for(coroutine, GUARD_TIMEOUT * 2))


def ws_url(server: RushServer, path: str) -> str:
    return f"ws://127.0.0.1:{server.port}{path}"


def state(server: RushServer) -> dict[str, Any]:
    """The app's recorded state (GET /state)."""
    with urllib.request.urlopen(f"{server.url}/state", timeout=GUARD_TIMEOUT) as response:
        return json.loads(response.read())


def upgrade_request(path: str = "/echo", fields: dict[str, str] | None = None, drop: tuple[str, ...] = ()) -> bytes:
    """A handshake request; ``fields`` replace or add fields, ``drop`` removes them."""
    base = {
        "Host": "localhost",
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode(),
        "Sec-WebSocket-Version": "13",
    }
    base.update(fields or {})
    lines = [f"GET {path} HTTP/1.1"] + [f"{name}: {value}" for name, value in base.items() if name not in drop]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def masked_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A client frame (masked, as clients must)."""
    mask = os.urandom(4)
    head = bytes([(0x80 if fin else 0) | opcode])
    length = len(payload)
    if length < 126:
        head += bytes([0x80 | length])
    elif length < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", length)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", length)
    return head + mask + bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))


def read_head(connection: Connection) -> bytes:
    """Reads the 101 head (and leaves what follows in the buffer)."""
    while b"\r\n\r\n" not in connection.buffer:
        assert connection.sock.recv_into, "connection closed"
        data = connection.sock.recv(65536)
        assert data, f"closed before the handshake answer: {connection.buffer!r}"
        connection.buffer += data
    head, _, rest = connection.buffer.partition(b"\r\n\r\n")
    connection.buffer = rest
    return head


def read_frame(connection: Connection) -> tuple[int, bytes]:
    """Reads one unmasked server frame: (opcode, payload)."""

    def need(count: int) -> None:
        while len(connection.buffer) < count:
            data = connection.sock.recv(1024 * 1024)
            assert data, "connection closed in the middle of a frame"
            connection.buffer += data

    need(2)
    opcode = connection.buffer[0] & 0x0F
    length = connection.buffer[1] & 0x7F
    offset = 2
    if length == 126:
        need(4)
        length = struct.unpack("!H", connection.buffer[2:4])[0]
        offset = 4
    elif length == 127:
        need(10)
        length = struct.unpack("!Q", connection.buffer[2:10])[0]
        offset = 10
    need(offset + length)
    payload = connection.buffer[offset : offset + length]
    connection.buffer = connection.buffer[offset + length :]
    return opcode, payload
