"""A raw HTTP/2 peer for the attack tests: frames built by hand, so that it
can do what no client library will (reset thousands of streams, never end a
header block, flood PINGs, never open its window), and the server's frames
read back one by one, their header blocks decoded with ``hpack`` (the
package under ``h2``) so the decoder's table stays in step.

Request header blocks use only HPACK's static table and literals without
indexing, so one block can be sent any number of times.
"""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

import hpack
from support import GUARD_TIMEOUT

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4

# Error codes (RFC 9113 section 7).
NO_ERROR, PROTOCOL_ERROR, CANCEL, REFUSED_STREAM, ENHANCE_YOUR_CALM = 0x0, 0x1, 0x8, 0x7, 0xB
# SETTINGS identifiers.
INITIAL_WINDOW_SIZE = 0x4


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def settings(*pairs: tuple[int, int]) -> bytes:
    return frame(SETTINGS, 0, 0, b"".join(key.to_bytes(2, "big") + value.to_bytes(4, "big") for key, value in pairs))


# Frames that carry nothing, each legal on its own: the flood tests' and
# benches/h2_bounds.py's ("empty DATA" goes on stream 1, a request whose
# body never ends, which the flooder opens first).
FLOODS: dict[str, bytes] = {
    "PING": frame(PING, 0, 0, b"abcdefgh"),
    "SETTINGS": frame(SETTINGS, 0, 0),
    "WINDOW_UPDATE": frame(WINDOW_UPDATE, 0, 0, (1).to_bytes(4, "big")),
    "PRIORITY": frame(PRIORITY, 0, 101, bytes([0, 0, 0, 0, 16])),
    "empty DATA": frame(DATA, 0, 1),
}


def _literal(index: int, value: bytes) -> bytes:
    """A field with a static-table name, literal value, not indexed."""
    assert len(value) < 127
    return bytes([index, len(value)]) + value


def request_block(path: str = "/hello", method: str = "GET") -> bytes:
    """:method, :scheme http, :path, :authority: stateless HPACK."""
    method_field = {"GET": b"\x82", "POST": b"\x83"}[method]
    return method_field + b"\x86" + _literal(4, path.encode()) + _literal(1, b"127.0.0.1")


def hpack_string(value: bytes) -> bytes:
    """An HPACK string literal (no Huffman) with its length as a 7-bit prefix integer."""
    return hpack_integer(len(value), 7) + value


def hpack_integer(value: int, prefix_bits: int, first: int = 0) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(value % 128 | 0x80)
        value //= 128
    out.append(value)
    return bytes(out)


@dataclass
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes
    fields: list[tuple[bytes, bytes]] = field(default_factory=list)

    @property
    def error_code(self) -> int:
        """RST_STREAM's code, or GOAWAY's (after the last stream id)."""
        start = 4 if self.kind == GOAWAY else 0
        return int.from_bytes(self.payload[start : start + 4], "big")

    @property
    def status(self) -> int | None:
        return next((int(value) for name, value in self.fields if name == b":status"), None)


class RawH2:
    """One HTTP/2 connection on a plain socket (or over TLS with ``tls``, a
    client context; ALPN ``h2`` is asked for): the preface and an empty
    SETTINGS (or ``initial_settings``) sent, frames written and read raw."""

    def __init__(
        self,
        port: int,
        initial_settings: bytes | None = None,
        rcvbuf: int | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            plain.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        plain.settimeout(GUARD_TIMEOUT)
        plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        plain.connect(("127.0.0.1", port))
        if tls is not None:
            tls.set_alpn_protocols(["h2"])
            plain = tls.wrap_socket(plain, server_hostname="localhost")
            assert plain.selected_alpn_protocol() == "h2"
        self.sock = plain
        self.buffer = bytearray()
        self.offset = 0  # where the next frame starts in ``buffer``
        self.decoder = hpack.Decoder()
        self.closed = False
        self.send(PREFACE + (initial_settings if initial_settings is not None else settings()))

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> Frame | None:
        """The next frame from the server; None once it closed (or reset)."""
        while True:
            got = self.buffered_frame()
            if got is not None:
                return got
            if self.closed:
                return None
            try:
                data = self.sock.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                data = b""
            self.received(data)

    def received(self, data: bytes) -> None:
        """Bytes read from the socket by the caller (b"": it closed)."""
        if not data:
            self.closed = True
        self.buffer += data

    def flood_until_goaway(
        self,
        flood: bytes,
        after_batch: Callable[[], None] = lambda: None,
        stop: Callable[[], bool] = lambda: False,
        bound: int = 64 * 1024 * 1024,
    ) -> tuple[int, list[Frame]]:
        """Sends ``flood`` a thousand times a batch and reads every answer as
        it comes (one thread, non-blocking: an SSL socket takes no
        concurrent reader and writer), until the server's GOAWAY was read,
        the connection closed, ``stop()`` says so, or ``bound`` bytes went;
        ``after_batch`` runs after each batch. Returns the bytes sent and
        the frames read (the PING ACKs a PING flood brings skipped)."""
        sock = self.sock
        sock.setblocking(False)
        batch = flood * 1000
        pending = memoryview(b"")
        sent = 0
        frames: list[Frame] = []
        while not self.closed and not stop():
            if not pending and sent < bound:
                pending = memoryview(batch)
            readable, writable, _ = select.select([sock], [sock] if pending else [], [], GUARD_TIMEOUT)
            assert readable or writable, "the connection stalled"
            if readable or (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                try:
                    self.received(sock.recv(65536))
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                    pass
                except (ConnectionResetError, ssl.SSLError):
                    self.received(b"")
                self.skip_ping_acks()
                while (got := self.buffered_frame()) is not None:
                    self.skip_ping_acks()
                    frames.append(got)
                    if got.kind == GOAWAY:
                        return sent, frames
            if writable and pending:
                try:
                    count = sock.send(pending[:65536])
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                    count = 0
                except OSError:
                    break  # closed on us mid-send: what was read before still counts
                pending = pending[count:]
                if not pending:
                    sent += len(batch)
                    after_batch()
        return sent, frames

    def skip_ping_acks(self) -> int:
        """Steps over the PING and SETTINGS ACKs at the front of what was read,
        without making frames of them (a PING or SETTINGS flood's answers,
        hundreds of thousands, read as fast as the server sends them: a
        client slowed by a loaded machine that made a frame of each fell so
        far behind that the server's lingering close, 2 s after its GOAWAY,
        reset the connection with the GOAWAY still unread); returns how many."""
        buffer, start, skipped = self.buffer, self.offset, 0
        while len(buffer) - start >= 9 and buffer[start + 4] & ACK:
            if buffer[start + 3] == PING and len(buffer) - start >= 17:
                start += 17
            elif buffer[start + 3] == SETTINGS and buffer[start : start + 3] == b"\0\0\0":
                start += 9
            else:
                break
            skipped += 1
        self.offset = start
        return skipped

    def buffered_frame(self) -> Frame | None:
        """The next complete frame already read, if any (no socket call)."""
        start = self.offset
        if len(self.buffer) - start < 9:
            return None
        length = int.from_bytes(self.buffer[start : start + 3], "big")
        if len(self.buffer) - start < 9 + length:
            return None
        header = bytes(self.buffer[start : start + 9])
        payload = bytes(self.buffer[start + 9 : start + 9 + length])
        # An offset, not a slice per frame: a flood's thousands of small
        # answers are read in linear time.
        self.offset = start + 9 + length
        if self.offset > 65536 and self.offset * 2 > len(self.buffer):
            del self.buffer[: self.offset]
            self.offset = 0
        got = Frame(header[3], header[4], int.from_bytes(header[5:9], "big") & 0x7FFFFFFF, payload)
        if got.kind == HEADERS:
            got.fields = list(self.decoder.decode(payload, raw=True))
        elif got.kind == SETTINGS and not got.flags & ACK:
            try:
                self.send(frame(SETTINGS, ACK, 0))
            except OSError:
                pass  # closed on us: the frames already read still count
        return got

    def frames_until_closed(self, limit: int = 1_000_000) -> list[Frame]:
        frames = []
        while (got := self.read_frame()) is not None:
            frames.append(got)
            assert len(frames) < limit, "the server kept sending"
        return frames

    def goaway(self, frames: list[Frame]) -> Frame | None:
        return next((got for got in frames if got.kind == GOAWAY), None)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawH2:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
