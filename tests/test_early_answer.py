"""An answer given before the request body was read reaches the client
(issue 33 item 10): httpx's own ``test_stream_request`` posts a chunked body
from an async generator to an app that answers without reading it, and
under rush it failed with ``ReadError`` about one run in ten, never under
uvicorn (the oracle here). The connection cannot be kept (the rest of the
body is unread), and closing it with input unread makes the kernel reset it,
which can destroy the answer before the client reads it; rush now shuts its
write side and discards what still comes, as after a refusal, and the
answer says ``Connection: close`` so that a client does not send its next
request on a connection that is closing."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support import GUARD_TIMEOUT, PYTHON, RushServer, ServerFactory, request

REQUESTS = 200


async def chunks() -> AsyncIterator[bytes]:
    yield b"Hello, "
    yield b"world!"


async def post_many(url: str) -> list[str]:
    """``REQUESTS`` chunked POSTs, one after another; what went wrong with each that failed."""
    failures = []
    async with httpx.AsyncClient(timeout=GUARD_TIMEOUT) as client:
        for _ in range(REQUESTS):
            try:
                response = await client.post(url, content=chunks())
            except httpx.TransportError as error:
                failures.append(repr(error))
                continue
            if (response.status_code, response.content) != (200, b"Hello, world!"):
                failures.append(f"{response.status_code} {response.content[:100]!r}")
    return failures


@pytest.mark.parametrize("server", ["rush", "uvicorn"])
def test_every_early_answer_to_a_streamed_body_arrives(rush_server: ServerFactory, server: str) -> None:
    if server == "rush":
        served: RushServer = rush_server("early_answer")
    else:
        served = rush_server("early_answer", command=[str(PYTHON), "-m", "uvicorn", "--http", "httptools"])
    failures = asyncio.run(post_many(served.url))
    assert not failures, f"{len(failures)} of {REQUESTS} lost: {failures[:3]}\n{served.describe()}"
    if server == "uvicorn":
        assert served.stop() in (0, -signal.SIGTERM), served.describe()


def test_the_rest_of_the_body_is_discarded_not_reset(rush_server: ServerFactory) -> None:
    """The mechanism, over a raw socket: the answer comes while the body is still arriving and
    says the connection closes; the client then sends the rest of its body, and the server
    reads it away and closes in order (an EOF, where a close with input unread is a reset)."""
    server = rush_server("early_answer")
    with server.connect() as connection:
        connection.send(request("POST", "/", [("Transfer-Encoding", "chunked")]) + b"7\r\nHello, \r\n")
        response = connection.read_response("POST")
        assert (response.status, response.body) == (200, b"Hello, world!")
        assert response.header("connection") == "close", response.headers
        rest = b"".join(b"4000\r\n" + b"x" * 0x4000 + b"\r\n" for _ in range(8)) + b"0\r\n\r\n"
        connection.send(rest)
        connection.sock.shutdown(socket.SHUT_WR)  # the client is done sending
        closed = connection.read_until_close()
        assert not closed.reset, "the server reset the connection instead of discarding the body"
        assert closed.responses == [] and closed.leftover == b"", closed
