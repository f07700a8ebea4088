"""Rapid Reset and a frame flood over HTTP/3 against ``rush --http3`` (issue 35).

A client that opens request streams and cancels them (RESET_STREAM and STOP_SENDING with
H3_REQUEST_CANCELLED, as a browser navigating away) before any answer, over and over, gets its
connection closed with H3_EXCESSIVE_LOAD after the 101st (rush-h3's ``max_peer_reset_streams``,
100, as over HTTP/2). A client that sends reserved (grease) frames on its control stream, which
HTTP/3 says to ignore, is closed the same way once it sent 8 MiB that carried no request (nginx's
rule: more than 8 bytes received per byte of request and response, past 8 MiB). The server goes
on serving.

The client is aioquic's: it writes each request's HEADERS and its cancellation (or each batch of
frames) in one flight, then waits for a PING round trip, so the server has handled it before the
next (no sleep decides anything). The in-memory tests of crates/rush-h3 (tests/abuse.rs) cover the
variants and the floods; this one checks that the bound holds in a running server.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, write_localhost_pki

aioquic = pytest.importorskip("aioquic")
from aioquic.asyncio.client import connect  # noqa: E402
from aioquic.asyncio.protocol import QuicConnectionProtocol  # noqa: E402
from aioquic.h3.connection import H3_ALPN, H3Connection  # noqa: E402
from aioquic.h3.events import DataReceived, HeadersReceived  # noqa: E402
from aioquic.quic.configuration import QuicConfiguration  # noqa: E402
from aioquic.quic.events import ConnectionTerminated  # noqa: E402

H3_REQUEST_CANCELLED = 0x10C
H3_EXCESSIVE_LOAD = 0x107
# rush-h3's H3Settings::max_peer_reset_streams.
MAX_PEER_RESET_STREAMS = 100
# rush-h3's FloodLimit: 8 received bytes per useful byte, past 8 MiB.
FLOOD_POINT = 8 * 1024 * 1024
FIELDS = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost"), (b":path", b"/")]


class _Raw(QuicConnectionProtocol):
    """A QUIC connection with ALPN h3 and no HTTP/3 layer: it writes its streams by hand."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.terminated: asyncio.Future[ConnectionTerminated] = asyncio.get_running_loop().create_future()

    def quic_event_received(self, event) -> None:  # type: ignore[no-untyped-def]
        if isinstance(event, ConnectionTerminated) and not self.terminated.done():
            self.terminated.set_result(event)


class _Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.terminated: asyncio.Future[ConnectionTerminated] = asyncio.get_running_loop().create_future()
        self.answers: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self.bodies: dict[int, tuple[int, bytes]] = {}

    def quic_event_received(self, event) -> None:  # type: ignore[no-untyped-def]
        if isinstance(event, ConnectionTerminated) and not self.terminated.done():
            self.terminated.set_result(event)
        for h3_event in self.h3.handle_event(event):
            status, body = self.bodies.get(h3_event.stream_id, (0, b""))
            if isinstance(h3_event, HeadersReceived):
                status = int(dict(h3_event.headers)[b":status"])
            elif isinstance(h3_event, DataReceived):
                body += h3_event.data
            self.bodies[h3_event.stream_id] = (status, body)
            waiting = self.answers.get(h3_event.stream_id)
            if getattr(h3_event, "stream_ended", False) and waiting and not waiting.done():
                waiting.set_result((status, body))

    async def get(self) -> tuple[int, bytes]:
        stream_id = self._quic.get_next_available_stream_id()
        self.answers[stream_id] = asyncio.get_running_loop().create_future()
        self.h3.send_headers(stream_id, FIELDS, end_stream=True)
        self.transmit()
        return await asyncio.wait_for(self.answers[stream_id], GUARD_TIMEOUT)

    def cancelled_request(self) -> None:
        stream_id = self._quic.get_next_available_stream_id()
        self.h3.send_headers(stream_id, FIELDS, end_stream=False)
        self._quic.reset_stream(stream_id, H3_REQUEST_CANCELLED)
        self._quic.stop_stream(stream_id, H3_REQUEST_CANCELLED)
        self.transmit()


def configuration(ca: Path) -> QuicConfiguration:
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name="localhost")
    config.load_verify_locations(str(ca))
    return config


async def rapid_reset(port: int, ca: Path, requests: int) -> tuple[int, ConnectionTerminated | None]:
    """Cancels up to ``requests`` requests, one round trip each; returns how many went out and
    how the connection ended, if it did."""
    async with connect("127.0.0.1", port, configuration=configuration(ca), create_protocol=_Client) as client:
        assert (await client.get())[0] == 200  # type: ignore[attr-defined]
        sent = 0
        while sent < requests and not client.terminated.done():  # type: ignore[attr-defined]
            client.cancelled_request()  # type: ignore[attr-defined]
            sent += 1
            await round_trip(client)  # type: ignore[arg-type]
        terminated = client.terminated.result() if client.terminated.done() else None  # type: ignore[attr-defined]
        return sent, terminated


async def round_trip(client: _Raw | _Client) -> None:
    """Waits for a PING's acknowledgement, or for the connection's end."""
    ping = asyncio.ensure_future(client.ping())
    await asyncio.wait([ping, client.terminated], timeout=GUARD_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
    if not ping.done():
        ping.cancel()
    elif ping.exception() is not None and not client.terminated.done():
        raise ping.exception()  # type: ignore[misc]


async def grease_flood(port: int, ca: Path, cap: int) -> tuple[int, ConnectionTerminated | None]:
    """Opens a control stream (SETTINGS, then reserved frame types of 2 bytes each) and writes
    64 KiB of them per round trip until the connection ends or ``cap`` bytes went out."""
    async with connect("127.0.0.1", port, configuration=configuration(ca), create_protocol=_Raw) as client:
        quic = client._quic
        stream_id = quic.get_next_available_stream_id(is_unidirectional=True)
        quic.send_stream_data(stream_id, b"\x00\x04\x00")
        batch = b"\x21\x00" * 32768
        sent = 0
        while sent < cap and not client.terminated.done():  # type: ignore[attr-defined]
            quic.send_stream_data(stream_id, batch)
            client.transmit()
            sent += len(batch)
            await round_trip(client)  # type: ignore[arg-type]
        terminated = client.terminated.result() if client.terminated.done() else None  # type: ignore[attr-defined]
        return sent, terminated


async def one_get(port: int, ca: Path) -> tuple[int, bytes]:
    async with connect("127.0.0.1", port, configuration=configuration(ca), create_protocol=_Client) as client:
        return await client.get()  # type: ignore[attr-defined]


def start(factory: ServerFactory, pki: dict[str, Path]) -> RushServer:
    return factory(
        "h3_flood_app",
        "--http3",
        "--ssl-certfile",
        str(pki["chain"]),
        "--ssl-keyfile",
        str(pki["key"]),
    )


def test_rapid_reset_closes_the_connection_with_excessive_load(rush_server: ServerFactory, tmp_path: Path) -> None:
    pki = write_localhost_pki(tmp_path)
    server = start(rush_server, pki)
    assert server.port is not None
    sent, terminated = asyncio.run(rapid_reset(server.port, pki["ca"], 3 * MAX_PEER_RESET_STREAMS))
    assert terminated is not None, f"{sent} cancelled requests and the connection is still open"
    assert terminated.error_code == H3_EXCESSIVE_LOAD, terminated
    # Closed at the 101st; the close follows the GOAWAY, so the PING's acknowledgement may come
    # first and one more cancelled request cross it.
    assert MAX_PEER_RESET_STREAMS + 1 <= sent <= MAX_PEER_RESET_STREAMS + 2, sent
    # The worker goes on serving other connections.
    assert asyncio.run(one_get(server.port, pki["ca"])) == (200, b"hello")
    server.assert_running("after the rapid reset")


def test_grease_frames_past_the_flood_point_close_the_connection(rush_server: ServerFactory, tmp_path: Path) -> None:
    pki = write_localhost_pki(tmp_path)
    server = start(rush_server, pki)
    assert server.port is not None
    sent, terminated = asyncio.run(grease_flood(server.port, pki["ca"], 3 * FLOOD_POINT))
    assert terminated is not None, f"{sent} bytes of grease frames and the connection is still open"
    assert terminated.error_code == H3_EXCESSIVE_LOAD, terminated
    # Closed once the flood point was passed, within a batch and the packets' overhead.
    assert FLOOD_POINT * 0.8 < sent < FLOOD_POINT * 1.25, sent
    assert asyncio.run(one_get(server.port, pki["ca"])) == (200, b"hello")
    server.assert_running("after the flood")
