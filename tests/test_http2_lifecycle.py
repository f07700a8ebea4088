"""HTTP/2 connections through reloads, stops and the drain's deadline.

Under load: several h2c connections, each with many concurrent streams, while
the supervisor is reloaded twice (SIGHUP) and one worker is stopped (SIGTERM),
the same shape as the HTTP/1.1 test in test_drain.py. Every request must end
with a 200. A draining worker sends GOAWAY; RFC 9113 section 6.8 says the
streams above its last stream id were not processed and may be retried on a
new connection. Neither h2load nor httpx can be the client: each h2load
client stops at its first GOAWAY and counts all its requests not yet sent as
failed (seen: 62164 of 100000 "failed" across two HUPs, while every one it
sent succeeded), and httpx's ``http2=True`` (python-h2 and httpcore) treats
the first GOAWAY as the connection's end, so the PING of the graceful
two-step form raises and the streams still answered fail. The client here is
a small one on hyperframe and hpack (both under the ``h2`` package): a GOAWAY
stops new streams on its connection, streams at or below its last stream id
are read to their end, the others are retried on a new connection.
Retries are counted and reported; a stream at or below the last stream id
that is reset or cut by the close is a failure, never a retry.

The drain's deadline: a stream that never ends outlives ``--graceful-timeout``;
at the deadline the worker says GOAWAY, closes the connection (the app is told
``http.disconnect``) and exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections import Counter

import hpack
import pytest
from hyperframe.frame import (
    DataFrame,
    Frame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)
from support import GUARD_TIMEOUT, ServerFactory, wait_for

from tests.test_http2 import h2_connect, raw_frames

CONNECTIONS = 4
STREAMS_PER_CONNECTION = 16
# The whole run's requests: bounded by count, and enough to outlast the
# reloads (the test checks that the load was still running after them).
REQUESTS = 60_000
REFUSED_STREAM = 0x7


class H2Load:
    """``CONNECTIONS`` h2c connections, each keeping ``STREAMS_PER_CONNECTION``
    GETs of ``/`` in flight, in a thread of its own, until ``REQUESTS`` were
    answered. A GOAWAY stops new streams on its connection; the streams at or
    below its last stream id are read to their end, the ones above it (and
    any reset with REFUSED_STREAM) are retried on a new connection, as RFC
    9113 sections 6.8 and 8.7 allow. A stream that ends any other way is a
    failure."""

    def __init__(self, port: int, path: str, body: bytes) -> None:
        self.port = port
        self.path = path
        self.body = body
        self.left = REQUESTS
        self.done = 0
        self.retries = 0
        self.connections = 0
        self.statuses: Counter[str] = Counter()
        self.failures: list[str] = []
        self.thread = threading.Thread(target=lambda: asyncio.run(self.run()), daemon=True)

    async def run(self) -> None:
        async def connection_slot() -> None:
            while self.left > 0 and len(self.failures) < 100:
                await asyncio.wait_for(self.one_connection(), GUARD_TIMEOUT * 2)

        await asyncio.gather(*(connection_slot() for _ in range(CONNECTIONS)))

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True

    def retry(self) -> None:
        self.left += 1
        self.retries += 1

    async def one_connection(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.connections += 1
        writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + SettingsFrame(0).serialize())
        encoder, decoder = hpack.Encoder(), hpack.Decoder()
        authority = f"127.0.0.1:{self.port}"
        request = [(":method", "GET"), (":scheme", "http"), (":authority", authority), (":path", self.path)]
        in_flight: dict[int, tuple[str, bytes]] = {}  # stream -> (status, body so far)
        next_stream = 1
        last_stream: int | None = None
        buffer = b""

        def start_streams() -> None:
            nonlocal next_stream
            while last_stream is None and len(in_flight) < STREAMS_PER_CONNECTION and self.take():
                headers = HeadersFrame(next_stream, flags=["END_HEADERS", "END_STREAM"])
                headers.data = encoder.encode(request)
                writer.write(headers.serialize())
                in_flight[next_stream] = ("", b"")
                next_stream += 2

        def finish(stream: int) -> None:
            status, body = in_flight.pop(stream)
            self.statuses[status] += 1
            self.done += 1
            if body != self.body:
                self.failures.append(f"stream {stream}: body {body[:60]!r}")

        def handle(frame: Frame) -> None:
            nonlocal last_stream
            if isinstance(frame, SettingsFrame) and "ACK" not in frame.flags:
                writer.write(SettingsFrame(0, flags=["ACK"]).serialize())
            elif isinstance(frame, PingFrame) and "ACK" not in frame.flags:
                writer.write(PingFrame(0, flags=["ACK"], opaque_data=frame.opaque_data).serialize())
            elif isinstance(frame, GoAwayFrame):
                last_stream = frame.last_stream_id
                for stream in [stream for stream in in_flight if stream > last_stream]:
                    del in_flight[stream]
                    self.retry()
            elif isinstance(frame, RstStreamFrame) and frame.stream_id in in_flight:
                del in_flight[frame.stream_id]
                if frame.error_code == REFUSED_STREAM:
                    self.retry()
                else:
                    self.failures.append(f"stream {frame.stream_id} reset with {frame.error_code}")
            elif isinstance(frame, HeadersFrame) and frame.stream_id in in_flight:
                status = dict(decoder.decode(frame.data))[":status"]
                in_flight[frame.stream_id] = (status, b"")
                if "END_STREAM" in frame.flags:
                    finish(frame.stream_id)
            elif isinstance(frame, DataFrame):
                if frame.flow_controlled_length:
                    writer.write(WindowUpdateFrame(0, window_increment=frame.flow_controlled_length).serialize())
                if frame.stream_id in in_flight:
                    status, body = in_flight[frame.stream_id]
                    in_flight[frame.stream_id] = (status, body + frame.data)
                    if "END_STREAM" in frame.flags:
                        finish(frame.stream_id)

        try:
            start_streams()
            while in_flight or (last_stream is None and self.left > 0):
                await writer.drain()
                data = await reader.read(65536)
                if not data:
                    break
                buffer += data
                while len(buffer) >= 9:
                    frame, length = Frame.parse_frame_header(memoryview(buffer[:9]))
                    if len(buffer) < 9 + length:
                        break
                    frame.parse_body(memoryview(buffer[9 : 9 + length]))
                    buffer = buffer[9 + length :]
                    handle(frame)
                start_streams()
        finally:
            # Closed under streams in flight: those above a GOAWAY's last
            # stream id were not processed; any other was lost.
            for stream in in_flight:
                if last_stream is not None and stream > last_stream:
                    self.retry()
                else:
                    self.failures.append(f"stream {stream} lost (GOAWAY last stream {last_stream})")
            writer.close()


# A sync handler answered within the loop's turn, and an async one that
# suspends, so that streams are in flight (and unanswered) at each signal.
LOADS = {
    "sync": ("basic", "/", b"Hello, World!"),
    "async": ("async_app", "/sleep?ms=2&id=h2", b'{"id":"h2","slept":true}'),
}


@pytest.mark.parametrize("handler", sorted(LOADS))
def test_two_reloads_and_a_worker_stop_under_h2_load_fail_no_request(rush_server: ServerFactory, handler: str) -> None:
    app, path, body = LOADS[handler]
    server = rush_server(app, "--workers", "2", "--http", "auto", bind="port", allow_worker_deaths=True)
    first = server.wait_for_workers(2)
    load = H2Load(server.port, path, body)
    load.thread.start()
    try:
        wait_for(lambda: load.done > 500, "the h2 load to reach the server")
        seen = set(first)
        for _ in range(2):
            server.send_signal(signal.SIGHUP)
            seen = wait_for(
                lambda seen=seen: (pids := server.worker_pids()) and len(pids) == 2 and not pids & seen and pids,
                "the reload to replace both workers",
            )
            # The new workers answer the load before the next signal.
            before = load.done
            wait_for(lambda before=before: load.done > before + 500, "the load to go on after the reload")
        victim = min(seen)
        os.kill(victim, signal.SIGTERM)
        wait_for(lambda: victim not in server.worker_pids(), "the stopped worker to exit")
        still_running = load.thread.is_alive()
    finally:
        load.thread.join(timeout=GUARD_TIMEOUT * 8)
    print(
        f"\nh2 load through 2 reloads and a worker stop: {load.done} requests over {load.connections} "
        f"connections, {load.retries} streams not processed and retried, statuses {dict(load.statuses)}"
    )
    assert not load.thread.is_alive(), "the load did not finish"
    assert still_running, "the load ended before the reloads did: raise REQUESTS"
    assert load.failures == []
    assert load.statuses == {"200": REQUESTS}
    assert load.done == REQUESTS
    # The reloads' GOAWAYs reached the client (each old worker's connections
    # were replaced by new ones).
    assert load.connections > CONNECTIONS


def test_a_stream_past_the_graceful_timeout_is_closed_at_the_deadline(rush_server: ServerFactory) -> None:
    server = rush_server("tests.apps.h2_apps:asgi", "--http", "auto", "--graceful-timeout", "2")
    sock, connection = h2_connect(server.port)
    with sock:
        headers = [(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", "/endless")]
        connection.send_headers(1, headers, end_stream=True)
        sock.sendall(connection.data_to_send())
        # Raw frames from here (the h2 package would end the stream at GOAWAY):
        # the server's SETTINGS acknowledged, the windows kept open for what
        # was read, so the stream is never stalled by the client.
        received = b""
        settings_acknowledged = signalled = False
        while chunk := sock.recv(65536):
            received += chunk
            frames = raw_frames(received)
            if not settings_acknowledged and any(kind == 0x4 and not flags & 0x1 for kind, flags, _, _ in frames):
                sock.sendall(frame(0x4, 0x1, 0, b""))
                settings_acknowledged = True
            increment = len(chunk).to_bytes(4, "big")
            sock.sendall(frame(0x8, 0, 0, increment) + frame(0x8, 0, 1, increment))
            if not signalled and any(kind == 0x0 and stream == 1 for kind, _, stream, _ in frames):
                # The response has started: stop the worker. The stream never
                # ends on its own, so only the deadline ends the read loop.
                server.send_signal(signal.SIGTERM)
                signalled = True
    assert signalled, "closed before the response started"
    frames = raw_frames(received)
    goaways = [payload for kind, _, _, payload in frames if kind == 0x7]
    assert goaways, "closed without GOAWAY"
    # The last GOAWAY names stream 1 as processed.
    assert int.from_bytes(goaways[-1][:4], "big") & 0x7FFFFFFF == 1
    assert not any(kind == 0x0 and flags & 0x1 and stream == 1 for kind, flags, stream, _ in frames)
    server.wait_for_log("endless stream told http.disconnect")
    # The worker ended the drain itself, before the supervisor's SIGKILL
    # (which would log "exited (signal SIGKILL)").
    server.wait_for_log(r"worker \d+ exited \(exit code 0\)")
    assert server.wait_exit(timeout=GUARD_TIMEOUT * 2) == 0


def frame(kind: int, flags: int, stream: int, payload: bytes) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
