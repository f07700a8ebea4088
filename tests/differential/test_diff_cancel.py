"""Requests the client gives up on, against hypercorn's access log: the same requests to
tests/differential/apps/cancel_app.py under rush and hypercorn (the recorder around it, so the
test resets a stream only once its app runs), and the same access-log lines, one per request.

Over h2c, a raw peer (h2_raw.py) completes one request, resets one stream mid-response (an
SSE-like stream), one while its app awaits the client (a long poll) and one before its app sent
any head (busy elsewhere), then completes one more on the same connection. Over HTTP/1.1, a
client closes while its app awaits it. Both servers log `-` for a request that got no head; a
stream cut mid-response is the one deliberate difference (deliberate.toml)."""

from __future__ import annotations

import re
import socket

import hpack
import pytest
from h2_raw import CANCEL, DATA, END_HEADERS, END_STREAM, HEADERS, RST_STREAM, RawH2, frame
from harness import Pair, Side, start_pair
from support import GUARD_TIMEOUT, ServerFactory, wait_for

FORMAT = "%(m)s %(U)s %(s)s"
LINE = re.compile(r"GET (/\w+) (\S+)$")


@pytest.fixture(scope="module")
def pair(module_servers: ServerFactory) -> Pair:
    return start_pair(
        module_servers,
        "cancel_app",
        "asgi",
        reference="hypercorn",
        rush_args=["--access-log", "--access-log-format", FORMAT],
        reference_args=["--access-logfile", "-", "--access-logformat", FORMAT],
    )


def logged(side: Side) -> list[tuple[str, str]]:
    found = (LINE.search(line) for line in side.server.stdout_text().splitlines())
    return [(match[1], match[2]) for match in found if match and match[1] != "/__readiness_probe__"]


def request(path: str) -> list[tuple[bytes, bytes]]:
    return [(b":method", b"GET"), (b":scheme", b"http"), (b":path", path.encode()), (b":authority", b"127.0.0.1")]


def h2_cancels(side: Side) -> None:
    encoder = hpack.Encoder()

    def open_stream(stream: int, path: str) -> None:
        peer.send(frame(HEADERS, END_STREAM | END_HEADERS, stream, encoder.encode(request(path))))

    def read_until(stream: int, first_data: bool = False) -> None:
        for _ in range(10_000):
            got = peer.read_frame()
            assert got is not None, f"the connection closed under {side.name}"
            if got.stream == stream and got.kind == DATA and (first_data or got.flags & END_STREAM):
                return
        raise AssertionError("no answer after 10,000 frames")

    with RawH2(side.server.port) as peer:
        open_stream(1, "/ok")
        read_until(1)
        open_stream(3, "/stream")
        read_until(3, first_data=True)
        open_stream(5, "/wait")
        open_stream(7, "/slow")
        wait_for(lambda: side.events("/wait") and side.events("/slow"), f"the apps running under {side.name}")
        for stream in (3, 5, 7):
            peer.send(frame(RST_STREAM, 0, stream, CANCEL.to_bytes(4, "big")))
        open_stream(9, "/ok")
        read_until(9)


def http1_gone(side: Side) -> None:
    with socket.create_connection(("127.0.0.1", side.server.port), timeout=GUARD_TIMEOUT) as client:
        client.sendall(b"GET /wait HTTP/1.1\r\nHost: 127.0.0.1\r\nx-diff-id: h1-wait\r\n\r\n")
        side.wait_events("h1-wait", lambda events: len(events) > 0, "the app running")
        client.shutdown(socket.SHUT_WR)
        # The app hears http.disconnect and returns: wait for that, not a time.
        side.wait_finished("h1-wait")


def lines_of(side: Side, count: int) -> list[tuple[str, str]]:
    def enough() -> list[tuple[str, str]] | None:
        lines = logged(side)
        return lines if len(lines) >= count else None

    return wait_for(enough, f"{count} access-log lines from {side.name}")


def test_cancelled_requests_are_logged_as_hypercorn_logs_them(pair: Pair) -> None:
    def script(side: Side) -> dict:
        h2_cancels(side)
        h2_lines = lines_of(side, 5)
        http1_gone(side)
        lines = lines_of(side, 6)
        statuses: dict[str, list[str]] = {}
        for path, status in h2_lines:
            statuses.setdefault(path, []).append(status)
        return {"lines": len(lines), "h2": statuses, "http1-wait": lines[len(h2_lines) :]}

    pair.check("cancels", script)
