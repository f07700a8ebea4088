"""A small HTTP/3 client for the tests, built on aioquic's QUIC and HTTP/3 state machines
(``QuicConnection`` driven by its asyncio datagram protocol, ``H3Connection`` on top).

It is used synchronously: each `H3Client` runs its own asyncio loop in a daemon thread (so the
connection keeps acknowledging, retransmitting and answering while the test does something
else) and every method hands a coroutine to that loop and waits for it, never longer than the
guard timeout, which fails the test rather than paces it.

What it offers beyond a plain request:

* ``open`` / ``send`` / ``wait`` / ``response``: a request whose body goes out in pieces,
  with the test deciding when each piece leaves, and several streams open on one connection
  at once (``requests`` runs a list of them concurrently);
* ``cancel``: RESET_STREAM and STOP_SENDING on a stream mid-body, as a browser that navigates
  away does; ``rebind``: the connection moved to a new local port, as behind a NAT;
  ``key_update``: new 1-RTT keys; ``session_ticket`` / ``resumed``: a session resumed;
* ``send_raw_headers`` / ``send_raw``: a HEADERS frame with fields no real client would send
  (aioquic encodes what it is given without checking it) and arbitrary bytes on a stream;
* the server's GOAWAY (read off its control stream, which aioquic's client otherwise
  ignores) and how the connection ended (``terminated``);
* the server's certificate verified against the tests' CA (``ca``), with SNI ``localhost``.

``free_tcp_and_udp_port``, ``sockets_on`` and ``socket_counts`` pick a port for a server that binds
both TCP and UDP and tell when it has (from /proc/net, so looking does not take the port).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StopSendingReceived, StreamDataReceived, StreamReset
from aioquic.tls import SessionTicket
from support import GUARD_TIMEOUT

T = TypeVar("T")

# HTTP/3 error codes (RFC 9114 section 8.1) the tests name.
H3_NO_ERROR = 0x100
H3_REQUEST_CANCELLED = 0x10C
H3_MESSAGE_ERROR = 0x10E

Fields = Sequence[tuple[str, str]]


@dataclass
class H3Response:
    """What arrived on one request stream so far (a copy: later events do not change it)."""

    stream_id: int
    status: int | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    trailers: list[tuple[str, str]] | None = None
    informational: list[tuple[int, list[tuple[str, str]]]] = field(default_factory=list)
    ended: bool = False
    # The server's RESET_STREAM / STOP_SENDING on this stream, with its error code.
    reset_code: int | None = None
    stop_sending_code: int | None = None

    def header(self, name: str) -> str | None:
        values = self.header_list(name)
        return values[0] if values else None

    def header_list(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode()

    @property
    def finished(self) -> bool:
        """Ended normally or reset by the server: nothing more will come."""
        return self.ended or self.reset_code is not None

    def copy(self) -> H3Response:
        return H3Response(
            self.stream_id,
            self.status,
            list(self.headers),
            self.body,
            None if self.trailers is None else list(self.trailers),
            list(self.informational),
            self.ended,
            self.reset_code,
            self.stop_sending_code,
        )


def _text_fields(fields: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in fields]


def _varint(data: bytes, position: int) -> tuple[int, int] | None:
    """A QUIC variable-length integer at ``position``: (value, next position), or None if cut."""
    if position >= len(data):
        return None
    length = 1 << (data[position] >> 6)
    if position + length > len(data):
        return None
    value = data[position] & 0x3F
    for byte in data[position + 1 : position + length]:
        value = (value << 8) | byte
    return value, position + length


class _ControlStreamReader:
    """Follows the frames of the server's control stream (a unidirectional stream whose type is
    0x00) to see its GOAWAY frames; aioquic's client reads the stream too, and drops GOAWAY."""

    def __init__(self) -> None:
        self.buffers: dict[int, bytes] = {}
        self.control_stream: int | None = None
        self.goaway_ids: list[int] = []
        self._position = 0

    def feed(self, stream_id: int, data: bytes) -> None:
        if self.control_stream is None:
            self.buffers[stream_id] = self.buffers.get(stream_id, b"") + data
            kind = _varint(self.buffers[stream_id], 0)
            if kind is None or kind[0] != 0x00:
                return
            self.control_stream = stream_id
            self._position = kind[1]
        elif stream_id == self.control_stream:
            self.buffers[stream_id] += data
        else:
            return
        buffer = self.buffers[stream_id]
        while True:
            frame_type = _varint(buffer, self._position)
            length = frame_type and _varint(buffer, frame_type[1])
            if not frame_type or not length or length[1] + length[0] > len(buffer):
                return
            payload = buffer[length[1] : length[1] + length[0]]
            if frame_type[0] == 0x07:
                identifier = _varint(payload, 0)
                if identifier is not None:
                    self.goaway_ids.append(identifier[0])
            self._position = length[1] + length[0]


class _H3Connection(H3Connection):
    """aioquic's HTTP/3 connection, except that the answer to a HEAD request may state a
    Content-Length without a body (RFC 9110 9.3.2): aioquic 1.7 checks every response's length
    against its DATA and closes the connection on a HEAD answer."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.head_streams: set[int] = set()

    def _check_content_length(self, stream: Any) -> None:
        if stream.stream_id not in self.head_streams:
            super()._check_content_length(stream)


class _Protocol(QuicConnectionProtocol):
    """The QUIC connection's protocol: feeds every QUIC event to ``H3Connection`` and keeps what
    each stream received; ``changed`` is set after every batch of events."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.h3 = _H3Connection(self._quic)
        self.streams: dict[int, H3Response] = {}
        self.control = _ControlStreamReader()
        self.terminated: ConnectionTerminated | None = None
        self.changed = asyncio.Event()

    def stream(self, stream_id: int) -> H3Response:
        return self.streams.setdefault(stream_id, H3Response(stream_id))

    def quic_event_received(self, event: Any) -> None:
        if isinstance(event, StreamDataReceived) and event.stream_id % 4 == 3:
            # Server-initiated unidirectional: the control stream and QPACK's.
            self.control.feed(event.stream_id, event.data)
        elif isinstance(event, StreamReset):
            self.stream(event.stream_id).reset_code = event.error_code
        elif isinstance(event, StopSendingReceived):
            self.stream(event.stream_id).stop_sending_code = event.error_code
        elif isinstance(event, ConnectionTerminated):
            self.terminated = event
        for h3_event in self.h3.handle_event(event):
            if isinstance(h3_event, HeadersReceived):
                self._headers(h3_event)
            elif isinstance(h3_event, DataReceived):
                stream = self.stream(h3_event.stream_id)
                stream.body += h3_event.data
                stream.ended |= h3_event.stream_ended
        self.changed.set()

    def _headers(self, event: HeadersReceived) -> None:
        stream = self.stream(event.stream_id)
        fields = _text_fields(event.headers)
        status = next((int(value) for name, value in fields if name == ":status"), None)
        regular = [(name, value) for name, value in fields if not name.startswith(":")]
        if stream.status is not None:
            stream.trailers = regular
        elif status is not None and status < 200:
            stream.informational.append((status, regular))
        else:
            stream.status, stream.headers = status, regular
        stream.ended |= event.stream_ended


class H3Client:
    """One HTTP/3 connection to ``127.0.0.1:port`` (see the module's docstring)."""

    def __init__(
        self,
        port: int,
        *,
        ca: Path | None = None,
        host: str = "127.0.0.1",
        server_name: str = "localhost",
        alpn: Sequence[str] = tuple(H3_ALPN),
        timeout: float = GUARD_TIMEOUT,
        session_ticket: SessionTicket | None = None,
    ) -> None:
        self.port = port
        self.host = host
        self.timeout = timeout
        self.authority = f"{host}:{port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"h3-client-{port}", daemon=True)
        self._thread.start()
        configuration = QuicConfiguration(
            is_client=True,
            alpn_protocols=list(alpn),
            server_name=server_name,
            verify_mode=ssl.CERT_REQUIRED if ca is not None else ssl.CERT_NONE,
        )
        if ca is not None:
            configuration.load_verify_locations(cafile=str(ca))
        # A ticket from an earlier connection: this handshake asks to resume that session.
        configuration.session_ticket = session_ticket
        self._tickets: list[SessionTicket] = []
        self._transport: asyncio.DatagramTransport | None = None
        self._protocol: _Protocol | None = None
        try:
            self._call(self._connect(configuration))
        except BaseException:
            self.close()
            raise

    # -- plumbing -------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Runs ``coroutine`` on the client's loop and returns its result; a hang fails the test."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result((timeout or self.timeout) + 1)
        except TimeoutError:
            future.cancel()
            raise AssertionError(f"HTTP/3 client call did not finish within {timeout or self.timeout}s") from None

    async def _connect(self, configuration: QuicConfiguration) -> None:
        from aioquic.quic.connection import QuicConnection

        quic = QuicConnection(configuration=configuration, session_ticket_handler=self._tickets.append)
        self._transport, protocol = await self._loop.create_datagram_endpoint(
            lambda: _Protocol(quic), local_addr=(self.host, 0)
        )
        self._protocol = protocol
        protocol.connect((self.host, self.port))
        try:
            await asyncio.wait_for(protocol.wait_connected(), self.timeout)
        except ConnectionError:
            terminated = protocol.terminated
            detail = f"{terminated.error_code:#x} {terminated.reason_phrase!r}" if terminated else "no reason"
            raise ConnectionError(f"QUIC handshake with 127.0.0.1:{self.port} failed: {detail}") from None
        except TimeoutError:
            raise AssertionError(f"no QUIC handshake with 127.0.0.1:{self.port} within {self.timeout}s") from None

    @property
    def protocol(self) -> _Protocol:
        assert self._protocol is not None, "not connected"
        return self._protocol

    async def _until(self, predicate: Callable[[], Any], what: str, timeout: float | None = None) -> Any:
        protocol = self.protocol
        deadline = self._loop.time() + (timeout or self.timeout)
        while not (value := predicate()):
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                streams = {
                    stream_id: (stream.status, len(stream.body), stream.ended, stream.reset_code)
                    for stream_id, stream in protocol.streams.items()
                }
                raise AssertionError(
                    f"HTTP/3: timed out waiting for {what}; (status, body length, ended, reset) by stream: {streams}"
                )
            protocol.changed.clear()
            try:
                await asyncio.wait_for(protocol.changed.wait(), remaining)
            except TimeoutError:
                pass
        return value

    def __enter__(self) -> H3Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Sends CONNECTION_CLOSE (no error) and stops the client's loop, without waiting for the
        closing period: the server is told, and nothing more is read."""

        async def shut() -> None:
            if self._protocol is not None and self._protocol.terminated is None:
                self._protocol.close(error_code=0, reason_phrase="")
            if self._transport is not None:
                self._transport.close()

        if self._loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(shut(), self._loop).result(5)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(5)
        if not self._loop.is_running() and not self._loop.is_closed():
            self._loop.close()

    # -- requests -------------------------------------------------------------

    def request_fields(
        self, method: str, path: str, headers: Fields = (), authority: str | None = None
    ) -> list[tuple[bytes, bytes]]:
        fields = [(":method", method), (":scheme", "https"), (":authority", authority or self.authority)]
        fields += [(":path", path), *((name.lower(), value) for name, value in headers)]
        return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in fields]

    def open(
        self,
        method: str,
        path: str,
        headers: Fields = (),
        body: bytes | Iterable[bytes] | None = None,
        *,
        end: bool = True,
        authority: str | None = None,
    ) -> int:
        """Opens a request stream: HEADERS, then ``body`` (bytes, or pieces sent as one DATA frame
        each), ending the stream with the last of them unless ``end`` is false. Returns its id."""
        return self.send_raw_headers(self.request_fields(method, path, headers, authority), body=body, end=end)

    def send_raw_headers(
        self, fields: Sequence[tuple[bytes, bytes]], *, body: bytes | Iterable[bytes] | None = None, end: bool = True
    ) -> int:
        """A new request stream with exactly these fields (pseudo-headers included, in this order,
        unchecked), then ``body``; returns the stream id."""
        pieces = [body] if isinstance(body, bytes) else list(body or ())

        async def go() -> int:
            protocol = self.protocol
            stream_id = protocol._quic.get_next_available_stream_id()
            protocol.stream(stream_id)
            if (b":method", b"HEAD") in fields:
                protocol.h3.head_streams.add(stream_id)
            protocol.h3.send_headers(stream_id, list(fields), end_stream=end and not pieces)
            for index, piece in enumerate(pieces):
                protocol.h3.send_data(stream_id, piece, end_stream=end and index == len(pieces) - 1)
                protocol.transmit()
            protocol.transmit()
            return stream_id

        return self._call(go())

    def send_headers(self, stream_id: int, fields: Sequence[tuple[bytes, bytes]], *, end: bool = False) -> None:
        """A HEADERS frame with exactly these fields on a stream already open."""

        async def go() -> None:
            self.protocol.h3.send_headers(stream_id, list(fields), end_stream=end)
            self.protocol.transmit()

        self._call(go())

    def send(self, stream_id: int, data: bytes, *, end: bool = False) -> None:
        """One more DATA frame on an open request stream (``end``: with the stream's FIN)."""

        async def go() -> None:
            self.protocol.h3.send_data(stream_id, data, end_stream=end)
            self.protocol.transmit()

        self._call(go())

    def send_raw(self, stream_id: int, data: bytes, *, end: bool = False) -> None:
        """Bytes written on a stream as they are, no HTTP/3 framing added."""

        async def go() -> None:
            self.protocol._quic.send_stream_data(stream_id, data, end)
            self.protocol.transmit()

        self._call(go())

    def new_stream(self, unidirectional: bool = False) -> int:
        """The id of a new client stream (nothing sent on it yet)."""

        async def go() -> int:
            return self.protocol._quic.get_next_available_stream_id(is_unidirectional=unidirectional)

        return self._call(go())

    def rebind(self) -> None:
        """Moves the connection to a new local UDP port, as a NAT rebinding does: the server sees
        the same connection (the same connection ids) arrive from a new address."""

        async def go() -> None:
            old = self._transport
            self._transport, _ = await self._loop.create_datagram_endpoint(
                lambda: self.protocol, local_addr=(self.host, 0)
            )
            if old is not None:
                old.close()

        self._call(go())

    def cancel(self, stream_id: int, code: int = H3_REQUEST_CANCELLED) -> None:
        """Abandons a request: RESET_STREAM (the request's sending side) and STOP_SENDING (the
        response's), both with ``code``."""

        async def go() -> None:
            quic = self.protocol._quic
            quic.reset_stream(stream_id, code)
            quic.stop_stream(stream_id, code)
            self.protocol.transmit()

        self._call(go())

    def wait(
        self, stream_id: int, until: Callable[[H3Response], Any], what: str = "", timeout: float | None = None
    ) -> H3Response:
        """Waits until what arrived on ``stream_id`` satisfies ``until``; returns a copy of it."""

        async def go() -> H3Response:
            stream = self.protocol.stream(stream_id)
            await self._until(lambda: until(stream), what or f"stream {stream_id}", timeout)
            return stream.copy()

        return self._call(go(), timeout)

    def response(self, stream_id: int) -> H3Response:
        """Waits until the stream is finished (ended, or reset by the server)."""
        return self.wait(stream_id, lambda stream: stream.finished, f"the end of stream {stream_id}")

    def outcome(self, stream_id: int) -> H3Response | ConnectionTerminated:
        """The stream's end, or the connection's if the server closed it first."""

        async def go() -> H3Response | ConnectionTerminated:
            protocol = self.protocol
            stream = protocol.stream(stream_id)
            await self._until(lambda: stream.finished or protocol.terminated, f"stream {stream_id} or the close")
            return stream.copy() if stream.finished else protocol.terminated

        return self._call(go())

    def request(
        self,
        method: str,
        path: str,
        headers: Fields = (),
        body: bytes | Iterable[bytes] | None = None,
        *,
        authority: str | None = None,
    ) -> H3Response:
        """One whole request: (status, headers, body, trailers) in the response returned."""
        return self.response(self.open(method, path, headers, body, authority=authority))

    def get(self, path: str, headers: Fields = ()) -> H3Response:
        return self.request("GET", path, headers)

    def requests(self, specs: Sequence[tuple[str, str, Fields, bytes | None]]) -> list[H3Response]:
        """Several requests open at once on this connection, (method, path, headers, body) each;
        the responses in the same order."""

        async def go() -> list[H3Response]:
            protocol = self.protocol
            ids = []
            for method, path, headers, body in specs:
                stream_id = protocol._quic.get_next_available_stream_id()
                protocol.stream(stream_id)
                if method == "HEAD":
                    protocol.h3.head_streams.add(stream_id)
                protocol.h3.send_headers(stream_id, self.request_fields(method, path, headers), end_stream=not body)
                if body:
                    protocol.h3.send_data(stream_id, body, end_stream=True)
                ids.append(stream_id)
            protocol.transmit()
            streams = [protocol.stream(stream_id) for stream_id in ids]
            await self._until(lambda: all(stream.finished for stream in streams), f"{len(ids)} streams")
            return [stream.copy() for stream in streams]

        return self._call(go())

    # -- the connection -------------------------------------------------------

    def ping(self) -> None:
        """A PING answered: everything sent before it reached the server's QUIC stack. Returns
        as well if the connection ended meanwhile (``terminated`` says how)."""

        async def go() -> None:
            with contextlib.suppress(ConnectionError):
                await self.protocol.ping()

        self._call(go())

    def key_update(self) -> None:
        """Moves to the next 1-RTT keys (a QUIC key update): what follows is sealed with them.
        A PING answered first: RFC 9001 6.5 allows a new update only once a packet sealed with the
        current keys was acknowledged, which aioquic does not check (quinn closes the connection
        with KEY_UPDATE_ERROR when a client updates again too soon)."""
        self.ping()

        async def go() -> None:
            self.protocol.request_key_update()

        self._call(go())

    def wait_session_ticket(self) -> SessionTicket:
        """Waits for the server's first TLS session ticket (NewSessionTicket, after the handshake)."""

        async def go() -> SessionTicket:
            await self._until(lambda: self._tickets, "a TLS session ticket")
            return self._tickets[0]

        return self._call(go())

    @property
    def resumed(self) -> bool:
        """The handshake resumed the session of the ticket given (no certificate was sent)."""
        return self.protocol._quic.tls.session_resumed

    @property
    def goaway_ids(self) -> list[int]:
        return list(self.protocol.control.goaway_ids)

    def wait_goaway(self) -> int:
        """Waits for the server's GOAWAY; returns the stream id it carries."""

        async def go() -> int:
            control = self.protocol.control
            await self._until(lambda: control.goaway_ids, "the server's GOAWAY")
            return control.goaway_ids[-1]

        return self._call(go())

    def wait_terminated(self, timeout: float | None = None) -> ConnectionTerminated:
        """Waits until the connection ends (the server's CONNECTION_CLOSE, or the idle timeout)."""

        async def go() -> ConnectionTerminated:
            return await self._until(lambda: self.protocol.terminated, "the connection's end", timeout)

        return self._call(go(), timeout)

    @property
    def terminated(self) -> ConnectionTerminated | None:
        return self.protocol.terminated

    @property
    def alpn(self) -> str | None:
        return self.protocol._quic.tls.alpn_negotiated


def free_tcp_and_udp_port() -> int:
    """A port free a moment ago for both TCP and UDP on 127.0.0.1 (an HTTP/3 server binds both),
    taken below the kernel's ephemeral range: a port the kernel hands out (bind to port 0, or any
    outgoing connection on the machine) could be taken by another process before the server binds
    it, and the machine runs other tests at once."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    candidates = random.sample(range(10000, low), min(200, low - 10000))
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp, socket.socket() as tcp:
            try:
                udp.bind(("127.0.0.1", port))
                tcp.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no port free for both TCP and UDP in {len(candidates)} tries")


def sockets_on(port: int) -> dict[str, bool]:
    """Whether a UDP socket is bound to ``port`` and a TCP socket listens on it."""
    counts = socket_counts(port)
    return {kind: count > 0 for kind, count in counts.items()}


def socket_counts(port: int) -> dict[str, int]:
    """How many UDP sockets are bound to ``port`` and how many TCP sockets listen on it (each
    worker of a server with SO_REUSEPORT has its own)."""
    found = {"udp": 0, "tcp": 0}
    for kind, files in (("udp", ("udp", "udp6")), ("tcp", ("tcp", "tcp6"))):
        for name in files:
            try:
                lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
            except FileNotFoundError:
                continue
            for line in lines:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                # TCP: only a listening socket (state 0A) counts; UDP has no such state.
                if local_port == port and (kind == "udp" or fields[3] == "0A"):
                    found[kind] += 1
    return found
