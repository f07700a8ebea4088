"""A minimal asyncio HTTP/1.1 client for the soak's clients: reading one
response off a stream (Content-Length, chunked, or no body for HEAD, 1xx,
204 and 304), and naming what went wrong when a request fails."""

from __future__ import annotations

import asyncio
import errno
import json
from dataclasses import dataclass, field
from typing import Any

# Longest response head the client accepts (the servers send a few hundred bytes).
MAX_HEAD = 65536


class ServerClosed(Exception):
    """The server closed the connection before the whole response arrived."""


class BadResponse(Exception):
    """Bytes that are not an HTTP/1.1 response."""


@dataclass
class Response:
    status: int
    headers: dict[str, str] = field(default_factory=dict)  # lower-case names; the last value wins
    body: bytes = b""

    @property
    def closes(self) -> bool:
        return "close" in [token.strip().lower() for token in self.headers.get("connection", "").split(",")]

    def json(self) -> Any:
        return json.loads(self.body)


def parse_head(head: bytes) -> Response:
    lines = head.rstrip(b"\r\n").split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit() or len(parts[1]) != 3:
        raise BadResponse(f"not a status line: {lines[0][:100]!r}")
    response = Response(status=int(parts[1]))
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            raise BadResponse(f"malformed header line {line[:100]!r}")
        response.headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
    return response


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as error:
        raise ServerClosed(f"closed after {len(error.partial)} bytes of a response head") from None
    except asyncio.LimitOverrunError:
        raise BadResponse("response head too long") from None


async def _read_exactly(reader: asyncio.StreamReader, size: int) -> bytes:
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError as error:
        raise ServerClosed(f"closed after {len(error.partial)} of {size} body bytes") from None


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = bytearray()
    while True:
        try:
            line = await reader.readuntil(b"\r\n")
        except asyncio.IncompleteReadError:
            raise ServerClosed("closed inside a chunked body") from None
        try:
            size = int(line.split(b";")[0].strip(), 16)
        except ValueError:
            raise BadResponse(f"bad chunk size line {line[:60]!r}") from None
        if size == 0:
            while True:  # trailers, up to the empty line
                try:
                    trailer = await reader.readuntil(b"\r\n")
                except asyncio.IncompleteReadError:
                    raise ServerClosed("closed inside a chunked body's trailers") from None
                if trailer == b"\r\n":
                    return bytes(body)
        chunk = await _read_exactly(reader, size + 2)
        if chunk[-2:] != b"\r\n":
            raise BadResponse("chunk not followed by CRLF")
        body += chunk[:-2]


async def read_response(reader: asyncio.StreamReader, method: str) -> Response:
    """Reads one final response (skipping any 1xx) from ``reader``."""
    while True:
        response = parse_head(await _read_head(reader))
        if response.status >= 200:
            break
    if method == "HEAD" or response.status in (204, 304):
        return response
    encoding = response.headers.get("transfer-encoding", "").lower()
    if encoding:
        if encoding != "chunked":
            raise BadResponse(f"transfer coding {encoding!r}")
        response.body = await _read_chunked(reader)
    elif "content-length" in response.headers:
        try:
            length = int(response.headers["content-length"])
        except ValueError:
            raise BadResponse("bad Content-Length") from None
        response.body = await _read_exactly(reader, length)
    else:
        response.body = await reader.read()  # delimited by the close
    return response


def failure_kind(error: BaseException) -> str:
    """The name a failed attempt is counted under."""
    if isinstance(error, ConnectionRefusedError):
        return "refused"
    if isinstance(error, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return "reset"
    if isinstance(error, TimeoutError):
        return "timeout"
    if isinstance(error, ServerClosed):
        return "closed"
    if isinstance(error, BadResponse):
        return "bad_response"
    if isinstance(error, OSError) and error.errno is not None:
        return f"oserror_{errno.errorcode.get(error.errno, error.errno)}"
    return f"error_{type(error).__name__}"
