"""An RFC 8441 WebSocket client for the tests: the ``h2`` package drives the
HTTP/2 connection and the extended CONNECT, ``wsproto`` frames the
WebSocket (masking, fragments, close, permessage-deflate) on the stream.

Blocking and single-threaded: every wait reads the socket until a condition
holds, bounded by ``GUARD_TIMEOUT``. Response DATA is acknowledged (its
window opened) only when ``read=True``, so a test can be a client that does
not read."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
from support import GUARD_TIMEOUT
from wsproto.connection import Connection as WsConnection
from wsproto.connection import ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Message, Ping, TextMessage
from wsproto.extensions import PerMessageDeflate


class H2WebSocket:
    """One HTTP/2 connection to 127.0.0.1:``port`` and, after ``open``, one
    WebSocket on one of its streams."""

    def __init__(self, port: int, *, tls: bool = False) -> None:
        self.port = port
        self.tls = tls
        raw = socket.create_connection(("127.0.0.1", port), timeout=GUARD_TIMEOUT)
        if tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            context.set_alpn_protocols(["h2"])
            self.sock: socket.socket = context.wrap_socket(raw, server_hostname="localhost")
            assert self.sock.selected_alpn_protocol() == "h2"  # type: ignore[attr-defined]
        else:
            self.sock = raw
        config = h2.config.H2Configuration(client_side=True, header_encoding="utf-8")
        self.h2 = h2.connection.H2Connection(config=config)
        self.h2.initiate_connection()
        self.flush()
        self.server_settings: dict[int, int] | None = None
        self.stream = 0
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.body = b""
        self.reset_code: int | None = None
        self.ended = False
        self.closed = False
        self.ws: WsConnection | None = None
        self.events: list[Event] = []
        self.read = True
        self.unparsed = b""
        self.pong = False
        self.goaway = False
        # DATA received while not reading: its window credit, held back.
        self.unread = 0
        self.deflate = False

    # -- the connection -------------------------------------------------------

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def pump(self, timeout: float = GUARD_TIMEOUT) -> bool:
        """Reads once (waiting up to ``timeout``) and handles what came; False at EOF."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            return True
        if not data:
            self.closed = True
            return False
        # Fed one frame at a time, so that a graceful GOAWAY is seen before
        # the frames after it (see ``handle``).
        self.unparsed += data
        while len(self.unparsed) >= 9:
            end = 9 + int.from_bytes(self.unparsed[:3], "big")
            if len(self.unparsed) < end:
                break
            frame, self.unparsed = self.unparsed[:end], self.unparsed[end:]
            for event in self.h2.receive_data(frame):
                self.handle(event)
        self.flush()
        return True

    def handle(self, event: Any) -> None:
        if isinstance(event, h2.events.RemoteSettingsChanged):
            self.server_settings = {int(key): value.new_value for key, value in event.changed_settings.items()}
        elif isinstance(event, h2.events.ResponseReceived) and event.stream_id == self.stream:
            self.headers = dict(event.headers)
            self.status = int(self.headers[":status"])
            if self.status == 200:
                # Frames may follow in the same read: the codec is set up now.
                self.ws = WsConnection(ConnectionType.CLIENT, extensions=self.negotiated())
        elif isinstance(event, h2.events.DataReceived) and event.stream_id == self.stream:
            if self.read:
                self.h2.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            else:
                self.unread += event.flow_controlled_length
            if self.ws is not None:
                if not event.data:
                    return  # the END_STREAM's empty DATA frame
                self.ws.receive_data(event.data)
                self.events.extend(self.ws.events())
            else:
                self.body += event.data
        elif isinstance(event, h2.events.StreamEnded) and event.stream_id == self.stream:
            self.ended = True
        elif isinstance(event, h2.events.StreamReset) and event.stream_id == self.stream:
            self.reset_code = int(event.error_code)
        elif isinstance(event, h2.events.PingAckReceived):
            self.pong = True
        elif isinstance(event, h2.events.ConnectionTerminated):
            if event.error_code == 0 and self.stream and event.last_stream_id >= self.stream:
                # A graceful GOAWAY (a drain): RFC 9113 6.8 lets the streams
                # up to its last id go on, but the h2 package closes its
                # state machine at any GOAWAY; it is set back to go on.
                self.h2.state_machine.state = h2.connection.ConnectionState.CLIENT_OPEN
                self.goaway = True
            else:
                self.closed = True

    def wait(self, condition: Callable[[], Any], what: str) -> Any:
        deadline = time.monotonic() + GUARD_TIMEOUT
        while not (result := condition()):
            if time.monotonic() > deadline or self.closed:
                raise AssertionError(f"timed out waiting for {what}")
            self.pump(max(0.01, deadline - time.monotonic()))
        return result

    def start_reading(self) -> None:
        """A client that did not read (``read=False``) gives back the credit it held."""
        self.read = True
        if self.unread:
            self.h2.acknowledge_received_data(self.unread, self.stream)
            self.unread = 0
            self.flush()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> H2WebSocket:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the handshake ----------------------------------------------------------

    def connect_protocol_offered(self) -> bool:
        settings = self.wait(lambda: self.server_settings, "the server's SETTINGS")
        return settings.get(h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL) == 1

    def open(
        self,
        path: str,
        fields: Sequence[tuple[str, str]] = (("sec-websocket-version", "13"),),
        *,
        protocol: str = "websocket",
        deflate: bool = False,
    ) -> int | None:
        """Sends the extended CONNECT; returns the status (None after a reset)."""
        self.connect_protocol_offered()
        # A new stream: what the last one got is forgotten.
        self.status, self.reset_code, self.ended, self.ws = None, None, False, None
        self.headers, self.body, self.events = {}, b"", []
        self.stream = self.h2.get_next_available_stream_id()
        extra = [("sec-websocket-extensions", "permessage-deflate")] if deflate else []
        headers = [
            (":method", "CONNECT"),
            (":protocol", protocol),
            (":scheme", "https" if self.tls else "http"),
            (":path", path),
            (":authority", f"127.0.0.1:{self.port}"),
            *fields,
            *extra,
        ]
        self.h2.send_headers(self.stream, headers)
        self.flush()
        self.deflate = deflate
        self.wait(lambda: self.status is not None or self.reset_code is not None, "the answer to CONNECT")
        if self.status != 200:
            self.wait(lambda: self.ended or self.reset_code is not None, "the end of the refusal")
        return self.status

    def negotiated(self) -> list[PerMessageDeflate]:
        """permessage-deflate, if offered and the server's answer names it."""
        answer = self.headers.get("sec-websocket-extensions")
        if not (self.deflate and answer):
            return []
        extension = PerMessageDeflate()
        extension.finalize(answer)
        return [extension]

    # -- WebSocket messages -------------------------------------------------------

    def send(self, event: Event) -> None:
        """Frames ``event`` and sends it as the stream's flow control allows."""
        assert self.ws is not None
        data = self.ws.send(event)
        while data:
            window = min(self.h2.local_flow_control_window(self.stream), self.h2.max_outbound_frame_size)
            if window <= 0:
                self.pump(0.5)
                continue
            self.h2.send_data(self.stream, data[:window])
            data = data[window:]
            self.flush()

    def send_message(self, message: str | bytes, *, fragment: bool = False) -> None:
        kind = TextMessage if isinstance(message, str) else BytesMessage
        self.send(kind(data=message, message_finished=not fragment))

    def receive(self) -> Event:
        """The next WebSocket event (a whole message: fragments are joined)."""
        parts: list[Any] = []
        while True:
            event = self.wait(lambda: self.events and self.events.pop(0), "a WebSocket event")
            if isinstance(event, Ping):
                self.send(event.response())
                continue
            if isinstance(event, Message):
                parts.append(event.data)
                if not event.message_finished:
                    continue
                joined = "".join(parts) if isinstance(event, TextMessage) else b"".join(parts)
                return type(event)(data=joined)
            return event

    def close_handshake(self, code: int = 1000, reason: str = "") -> CloseConnection:
        """Closes from the client side; returns the server's close."""
        self.send(CloseConnection(code=code, reason=reason))
        event = self.receive()
        assert isinstance(event, CloseConnection), event
        return event

    def reset(self, code: int = 0x8) -> None:
        self.h2.reset_stream(self.stream, error_code=code)
        self.flush()

    def end_stream(self) -> None:
        self.h2.end_stream(self.stream)
        self.flush()
