"""A raw ASGI gRPC service for tests/test_http2_extensions.py, with no codegen:
gRPC's framing by hand (each message: a 1-byte compressed flag, a 4-byte
big-endian length, the payload), ``content-type: application/grpc``, and the
call's status in trailers (``grpc-status``, ``grpc-message``) sent with the
ASGI ``http.response.trailers`` extension. Payloads are raw bytes:

* ``/test.Echo/Unary``: one message back, ``echo:`` + the request's payload;
* ``/test.Echo/Count``: server streaming; the request's payload is a number N
  (ASCII), answered with N messages ``item 0`` .. ``item N-1``;
* ``/test.Echo/Missing``: no message, ``grpc-status: 5`` (NOT_FOUND) and a
  ``grpc-message``.

Anything else is ``grpc-status: 12`` (UNIMPLEMENTED). ``/extensions`` (plain
HTTP) answers the scope's extension names as JSON.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable
from typing import Any

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def frame(payload: bytes) -> bytes:
    """One uncompressed gRPC message."""
    return struct.pack(">?I", False, len(payload)) + payload


def unframe(data: bytes) -> list[bytes]:
    """The messages in a whole request body."""
    messages = []
    while data:
        _compressed, length = struct.unpack(">?I", data[:5])
        messages.append(data[5 : 5 + length])
        data = data[5 + length :]
    return messages


async def read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionResetError("the client left")
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


async def answer(send: Send, messages: list[bytes], status: int = 0, text: str = "") -> None:
    """The response: headers, the messages (one body message each), then the
    status in trailers."""
    headers = [(b"content-type", b"application/grpc")]
    await send({"type": "http.response.start", "status": 200, "headers": headers, "trailers": True})
    for payload in messages:
        await send({"type": "http.response.body", "body": frame(payload), "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
    trailers = [(b"grpc-status", str(status).encode())]
    if text:
        trailers.append((b"grpc-message", text.encode()))
    await send({"type": "http.response.trailers", "headers": trailers, "more_trailers": False})


async def app(scope: dict[str, Any], receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/extensions":
        body = json.dumps(sorted(scope.get("extensions", {}))).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})
        return
    requests = unframe(await read_body(receive))
    if scope["path"] == "/test.Echo/Unary":
        await answer(send, [b"echo:" + requests[0]])
    elif scope["path"] == "/test.Echo/Count":
        await answer(send, [f"item {index}".encode() for index in range(int(requests[0]))])
    elif scope["path"] == "/test.Echo/Missing":
        await answer(send, [], status=5, text="no such thing")
    else:
        await answer(send, [], status=12, text="unknown method")
