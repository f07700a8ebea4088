"""The QUIC interop runner's server-side test cases that need no network
simulator, against a real rush process with ``--http3``, with aioquic's QUIC
and HTTP/3 client driven from the test (issue 35).

The runner (quic-interop-runner, testcases_quic.py) starts a server in a
container, has a client download files of random bytes from it, compares
them with what the server served, and reads the packet traces. Here the
server is rush serving the files from a ``--static`` directory, the client
is aioquic, the comparison is byte for byte, and what the runner reads from
its traces is read from aioquic's own events and qlog trace, and from rush's
access log (one client address and port per connection, so "exactly one
handshake" is "every line names the same client port"). The runner fetches
most files over HTTP/0.9 (``hq-interop``); rush speaks only ``h3``, so every
case here downloads over HTTP/3, as the runner's own ``http3`` case does.

* handshake: one 1 KB file over one connection; no Retry was sent.
* transfer: 2, 3 and 5 MB at once over one connection; aioquic's receive
  windows (1 MiB per stream and per connection) make rush wait for
  MAX_STREAM_DATA and MAX_DATA, so flow control is exercised; rush closes
  nothing before the client does.
* multiplexing: 1,999 files of 32 bytes over one connection, all requested
  at once; rush's initial bidirectional stream limit is at most 1,000 (the
  runner's check), so it must raise the limit (MAX_STREAMS) as streams end.
* retry: rush sends Retry only above 64 handshakes from unvalidated
  addresses at once (crates/rush-h3, ``retry_above_unvalidated``). The test
  opens 64 handshakes from 64 sockets and leaves them unanswered, then a
  real client connects: it must get a Retry, come back with its token and
  download its file. The 64 are closed afterwards.
* resumption: a second connection resumes the first's TLS session with the
  ticket rush sent (aioquic reports ``session_resumed``; a resumed TLS 1.3
  handshake carries no Certificate, the runner's check).
* keyupdate: the client updates its 1-RTT keys a third of the way into a
  3 MB download; rush must answer in the new key phase (aioquic keeps no
  old keys: a packet in the old phase after the update fails to decrypt and
  is dropped, so the rest of the file arrives only if rush switched), and
  the file arrives whole.
* http3: 5 KB, 10 KB and 500 KB over one connection, status, length and
  type checked.

Not here: the cases that need the runner's network simulator (loss,
corruption, long RTT, blackhole, amplification under drops, rebinding,
migration), zerortt (rush turns 0-RTT off: replayable), chacha20 (a client
choice rush accepts through rustls), versionnegotiation and ECN.
"""

from __future__ import annotations

import asyncio
import random
import re
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, QuicEvent, StreamReset
from aioquic.quic.logger import QuicLogger
from aioquic.tls import SessionTicket
from support import GUARD_TIMEOUT, RushServer, ServerFactory, wait_for, write_localhost_pki

KB = 1000
MB = 1000 * KB

# The files each case downloads, by the runner's sizes (its KB and MB are powers of ten).
HANDSHAKE_FILES = {"handshake.bin": 1 * KB}
TRANSFER_FILES = {"transfer-2.bin": 2 * MB, "transfer-3.bin": 3 * MB, "transfer-5.bin": 5 * MB}
RETRY_FILES = {"retry.bin": 10 * KB}
RESUMPTION_FILES = {"resumption-1.bin": 5 * KB, "resumption-2.bin": 10 * KB}
KEY_UPDATE_FILES = {"keyupdate.bin": 3 * MB}
HTTP3_FILES = {"h3-5k.bin": 5 * KB, "h3-10k.bin": 10 * KB, "h3-500k.bin": 500 * KB}
MULTIPLEXING_COUNT = 1999
MULTIPLEXING_FILES = {f"many/{index:04}.bin": 32 for index in range(MULTIPLEXING_COUNT)}

# crates/rush-h3's H3Settings::retry_above_unvalidated, which --http3 keeps at its default.
RETRY_ABOVE_UNVALIDATED = 64

# A guard for a whole case (a hung server or a stalled transfer fails it); nothing is timed.
CASE_GUARD = GUARD_TIMEOUT * 4


@dataclass
class Site:
    directory: Path
    pki: dict[str, Path]

    def content(self, name: str) -> bytes:
        return (self.directory / name).read_bytes()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The files of every case, random bytes from a fixed seed, and the test CA."""
    directory = tmp_path_factory.mktemp("h3-site")
    (directory / "many").mkdir()
    files = {
        **HANDSHAKE_FILES,
        **TRANSFER_FILES,
        **RETRY_FILES,
        **RESUMPTION_FILES,
        **KEY_UPDATE_FILES,
        **HTTP3_FILES,
        **MULTIPLEXING_FILES,
    }
    generator = random.Random(35)
    for name, size in files.items():
        (directory / name).write_bytes(generator.randbytes(size))
    return Site(directory, write_localhost_pki(tmp_path_factory.mktemp("h3-pki")))


def serve(factory: ServerFactory, site: Site, *options: str) -> RushServer:
    """rush serving the site over TCP and TLS, and over HTTP/3 on the same port."""
    return factory(
        "",
        *options,
        "--static",
        f"/={site.directory}",
        "--http3",
        "--ssl-certfile",
        site.pki["chain"],
        "--ssl-keyfile",
        site.pki["key"],
        "--access-log",
    )


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, site: Site) -> RushServer:
    return serve(module_servers, site)


# ---------------------------------------------------------------------------
# aioquic's client with its HTTP/3 layer


@dataclass
class Answer:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


class H3Client(QuicConnectionProtocol):
    """One QUIC connection with aioquic's HTTP/3 layer over it; ``get`` sends
    a request on a new stream and returns its answer once the stream ends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.handshake: HandshakeCompleted | None = None
        self.terminated: ConnectionTerminated | None = None
        self.received = 0
        # Called with the body bytes received so far on the connection, after each DATA.
        self.on_data: Callable[[int], None] | None = None
        self._streams: dict[int, tuple[asyncio.Future[Answer], dict[bytes, bytes], bytearray]] = {}

    @property
    def local_port(self) -> int:
        return self._transport.get_extra_info("sockname")[1]

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, HandshakeCompleted):
            self.handshake = event
        elif isinstance(event, ConnectionTerminated):
            self.terminated = event
            for future, _, _ in self._streams.values():
                if not future.done():
                    future.set_exception(ConnectionError(f"connection closed: {event}"))
        elif isinstance(event, StreamReset) and event.stream_id in self._streams:
            future = self._streams[event.stream_id][0]
            if not future.done():
                future.set_exception(ConnectionError(f"stream reset: {event}"))
        for http_event in self.http.handle_event(event):
            stream = self._streams.get(getattr(http_event, "stream_id", -1))
            if stream is None:
                continue
            future, headers, body = stream
            if isinstance(http_event, HeadersReceived):
                headers.update(http_event.headers)
            elif isinstance(http_event, DataReceived):
                body += http_event.data
                self.received += len(http_event.data)
                if self.on_data is not None:
                    self.on_data(self.received)
            if getattr(http_event, "stream_ended", False) and not future.done():
                future.set_result(Answer(int(headers.get(b":status", b"0")), headers, bytes(body)))

    async def get(self, path: str) -> Answer:
        stream_id = self._quic.get_next_available_stream_id()
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._streams[stream_id] = (future, {}, bytearray())
        self.http.send_headers(
            stream_id,
            [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost"), (b":path", path.encode())],
            end_stream=True,
        )
        self.transmit()
        return await future


def client_configuration(site: Site, **options: Any) -> QuicConfiguration:
    """aioquic's defaults (1 MiB receive windows per stream and per connection) with the test CA
    and a qlog trace."""
    return QuicConfiguration(
        is_client=True,
        alpn_protocols=H3_ALPN,
        cafile=str(site.pki["ca"]),
        server_name="localhost",
        quic_logger=QuicLogger(),
        **options,
    )


def run(case: Any) -> Any:
    """Runs one case's coroutine on a new event loop, under the case guard."""

    async def guarded() -> Any:
        return await asyncio.wait_for(case, CASE_GUARD)

    return asyncio.run(guarded())


def qlog_events(configuration: QuicConfiguration, name: str) -> list[dict[str, Any]]:
    """The events called ``name`` (e.g. ``transport:packet_received``) of every trace of the client's qlog."""
    assert configuration.quic_logger is not None
    traces = configuration.quic_logger.to_dict()["traces"]
    return [event["data"] for trace in traces for event in trace["events"] if event["name"] == name]


def retries_received(configuration: QuicConfiguration) -> list[dict[str, Any]]:
    """The headers of the Retry packets the client received."""
    packets = qlog_events(configuration, "transport:packet_received")
    return [packet["header"] for packet in packets if packet["header"]["packet_type"] == "retry"]


def frames(configuration: QuicConfiguration, direction: str, frame_type: str) -> int:
    """How many frames of ``frame_type`` the client's trace shows in ``direction`` (packet_sent or packet_received)."""
    packets = qlog_events(configuration, f"transport:{direction}")
    return sum(1 for packet in packets for frame in packet.get("frames", ()) if frame["frame_type"] == frame_type)


async def fetch_all(client: H3Client, site: Site, names: list[str]) -> None:
    """Downloads ``names`` at once on the client's connection; each must be the file, byte for byte."""
    answers = await asyncio.gather(*(client.get(f"/{name}") for name in names))
    for name, answer in zip(names, answers, strict=True):
        expected = site.content(name)
        assert answer.status == 200, (name, answer.status, answer.headers)
        assert int(answer.headers[b"content-length"]) == len(expected), name
        # Not `==` on the bodies alone: a multi-megabyte diff would bury the failure.
        assert len(answer.body) == len(expected) and answer.body == expected, f"{name}: body differs"


def logged_ports(server: RushServer, names: list[str]) -> list[int]:
    """The client port of each access-log line for ``names`` over HTTP/3 (waits for all of them)."""
    pattern = r'127\.0\.0\.1:(\d+) - "GET /(\S+) HTTP/3" 200 '
    wanted = set(names)

    def lines() -> list[tuple[int, str]] | None:
        found = [(int(m.group(1)), m.group(2)) for m in re.finditer(pattern, server.stdout_text())]
        found = [(port, name) for port, name in found if name in wanted]
        return found if len(found) >= len(names) else None

    found = wait_for(lines, f"{len(names)} HTTP/3 access-log lines\n{server.describe()}")
    assert sorted(name for _, name in found) == sorted(names)
    return [port for port, _ in found]


# ---------------------------------------------------------------------------
# The cases


def test_handshake(server: RushServer, site: Site) -> None:
    configuration = client_configuration(site)

    async def case() -> int:
        async with connect("127.0.0.1", server.port, configuration=configuration, create_protocol=H3Client) as client:
            assert isinstance(client, H3Client)
            await fetch_all(client, site, list(HANDSHAKE_FILES))
            assert client.handshake is not None and client.handshake.alpn_protocol == "h3"
            return client.local_port

    port = run(case())
    assert retries_received(configuration) == []
    assert logged_ports(server, list(HANDSHAKE_FILES)) == [port]


def test_transfer(server: RushServer, site: Site) -> None:
    configuration = client_configuration(site)

    async def case() -> tuple[int, ConnectionTerminated | None]:
        async with connect("127.0.0.1", server.port, configuration=configuration, create_protocol=H3Client) as client:
            assert isinstance(client, H3Client)
            await fetch_all(client, site, list(TRANSFER_FILES))
            # rush closed nothing while the files were coming.
            terminated = client.terminated
            port = client.local_port
        return port, terminated

    port, terminated = run(case())
    assert terminated is None, terminated
    # Each file exceeds aioquic's windows: rush sent no more than the credit it had (aioquic
    # closes with FLOW_CONTROL_ERROR otherwise) and waited for these to send the rest.
    assert frames(configuration, "packet_sent", "max_stream_data") > 0
    assert frames(configuration, "packet_sent", "max_data") > 0
    assert set(logged_ports(server, list(TRANSFER_FILES))) == {port}


def test_multiplexing(server: RushServer, site: Site) -> None:
    configuration = client_configuration(site)

    async def case() -> int:
        async with connect("127.0.0.1", server.port, configuration=configuration, create_protocol=H3Client) as client:
            assert isinstance(client, H3Client)
            await fetch_all(client, site, list(MULTIPLEXING_FILES))
            return client.local_port

    port = run(case())
    (parameters,) = [
        event for event in qlog_events(configuration, "transport:parameters_set") if event["owner"] == "remote"
    ]
    # The runner's check: the server's initial limit is at most 1,000, so 1,999 streams needed it raised.
    assert 0 < parameters["initial_max_streams_bidi"] <= 1000
    assert frames(configuration, "packet_received", "max_streams") > 0
    assert set(logged_ports(server, list(MULTIPLEXING_FILES))) == {port}


def test_http3(server: RushServer, site: Site) -> None:
    configuration = client_configuration(site)

    async def case() -> tuple[int, list[Answer]]:
        async with connect("127.0.0.1", server.port, configuration=configuration, create_protocol=H3Client) as client:
            assert isinstance(client, H3Client)
            names = list(HTTP3_FILES)
            answers = await asyncio.gather(*(client.get(f"/{name}") for name in names))
            return client.local_port, answers

    port, answers = run(case())
    for name, answer in zip(HTTP3_FILES, answers, strict=True):
        assert answer.status == 200
        assert answer.headers[b"content-type"] == b"application/octet-stream"
        assert int(answer.headers[b"content-length"]) == HTTP3_FILES[name]
        assert answer.body == site.content(name), name
    assert set(logged_ports(server, list(HTTP3_FILES))) == {port}


def test_resumption(server: RushServer, site: Site) -> None:
    tickets: list[SessionTicket] = []
    first_configuration = client_configuration(site)
    first, second = RESUMPTION_FILES

    async def connection(configuration: QuicConfiguration, name: str) -> tuple[int, HandshakeCompleted]:
        async with connect(
            "127.0.0.1",
            server.port,
            configuration=configuration,
            create_protocol=H3Client,
            session_ticket_handler=tickets.append,
        ) as client:
            assert isinstance(client, H3Client)
            await fetch_all(client, site, [name])
            assert client.handshake is not None
            return client.local_port, client.handshake

    first_port, first_handshake = run(connection(first_configuration, first))
    assert not first_handshake.session_resumed
    # rustls sends its tickets right after the handshake, before any answer.
    assert tickets, "rush sent no session ticket"
    second_configuration = client_configuration(site, session_ticket=tickets[-1])
    second_port, second_handshake = run(connection(second_configuration, second))
    # Resumed with the ticket's PSK: a TLS 1.3 handshake that sends no Certificate.
    assert second_handshake.session_resumed
    assert not second_handshake.early_data_accepted
    assert first_port != second_port
    assert logged_ports(server, [first]) == [first_port]
    assert logged_ports(server, [second]) == [second_port]


def test_key_update(server: RushServer, site: Site) -> None:
    configuration = client_configuration(site)
    (name,) = KEY_UPDATE_FILES
    size = KEY_UPDATE_FILES[name]
    updated_at: list[int] = []

    async def case() -> tuple[int, int]:
        async with connect("127.0.0.1", server.port, configuration=configuration, create_protocol=H3Client) as client:
            assert isinstance(client, H3Client)

            def update_once(received: int) -> None:
                if not updated_at and received >= size // 3:
                    updated_at.append(received)
                    client._quic.request_key_update()
                    client.transmit()

            client.on_data = update_once
            await fetch_all(client, site, [name])
            return client.local_port, client.received

    port, received = run(case())
    assert updated_at, "the download ended before a third of it"
    # The update happened mid-transfer, and most of the file came in the new key phase.
    assert updated_at[0] < size and received - updated_at[0] >= size // 2
    updates = [(event["trigger"], event["key_type"]) for event in qlog_events(configuration, "security:key_updated")]
    ones = {("local_update", "client_1rtt_secret"), ("local_update", "server_1rtt_secret")}
    assert ones <= set(updates), updates
    last_local = max(index for index, update in enumerate(updates) if update in ones)
    # rush followed the client's update: nothing after it was taken for an update of rush's own.
    # (quinn starts a routine update of its own after 10 to 1,000 packets, so one may come before.)
    assert not [update for update in updates[last_local:] if update[0] == "remote_update"], updates
    assert logged_ports(server, [name]) == [port]


# ---------------------------------------------------------------------------
# Retry


def is_retry(datagram: bytes) -> bool:
    """A QUIC v1 long-header packet of type Retry (RFC 9000 section 17.2: form bit, type 0b11)."""
    return bool(datagram) and datagram[0] & 0x80 != 0 and (datagram[0] & 0x30) >> 4 == 3


class StalledHandshakes:
    """Handshakes started from sockets of their own and left unanswered: to
    rush each is an unvalidated address holding a connection in its handshake."""

    def __init__(self, site: Site, port: int, count: int) -> None:
        self.address = ("127.0.0.1", port)
        self.connections: list[tuple[socket.socket, QuicConnection]] = []
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            connection = QuicConnection(configuration=client_configuration(site))
            self.connections.append((sock, connection))

    def start(self) -> list[bytes]:
        """Sends each client's first flight; returns each socket's first datagram back."""
        for sock, connection in self.connections:
            connection.connect(self.address, now=time.time())
            self._send(sock, connection)
        return [self._receive(sock) for sock, _ in self.connections]

    def _send(self, sock: socket.socket, connection: QuicConnection) -> None:
        for data, _ in connection.datagrams_to_send(now=time.time()):
            sock.sendto(data, self.address)

    def _receive(self, sock: socket.socket) -> bytes:
        readable, _, _ = select.select([sock], [], [], GUARD_TIMEOUT)
        assert readable, "rush did not answer a handshake"
        return sock.recv(65536)

    def close(self) -> None:
        """Closes the sockets. rush's stop does not wait for these handshakes
        (closing them with CONNECTION_CLOSE first made its stop no faster)."""
        for sock, _ in self.connections:
            sock.close()


def test_retry(rush_server: ServerFactory, site: Site) -> None:
    # One worker: the threshold counts the handshakes of one worker's router.
    server = serve(rush_server, site, "--workers", "1")
    stalled = StalledHandshakes(site, server.port, RETRY_ABOVE_UNVALIDATED)
    try:
        answers = stalled.start()
        # Up to the threshold rush takes every handshake without a Retry.
        assert not [answer for answer in answers if is_retry(answer)]
        configuration = client_configuration(site)
        (name,) = RETRY_FILES

        async def case() -> int:
            async with connect(
                "127.0.0.1", server.port, configuration=configuration, create_protocol=H3Client
            ) as client:
                assert isinstance(client, H3Client)
                await fetch_all(client, site, [name])
                return client.local_port

        port = run(case())
    finally:
        stalled.close()
    # One Retry, then a handshake that used its token: the server's transport parameters name the
    # Retry's connection id (retry_source_connection_id, which aioquic also checks), and a server
    # sets it only for a connection whose token it accepted.
    retries = retries_received(configuration)
    assert len(retries) == 1, f"the client got {len(retries)} Retry packets"
    retry = retries[0]
    (parameters,) = [
        event for event in qlog_events(configuration, "transport:parameters_set") if event["owner"] == "remote"
    ]
    assert parameters.get("retry_source_connection_id") == retry["scid"], (parameters, retry)
    assert logged_ports(server, [name]) == [port]
