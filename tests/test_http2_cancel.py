"""Every HTTP/2 request that reached its app is logged and counted once,
the ones whose stream the client reset included (an EventSource the page
closed, a long poll given up, ``curl -m``): over h2c and over TLS, a raw
peer (h2_raw.py) opens streams to tests/differential/apps/cancel_app.py,
resets some mid-response, some while the app waits on the client and some
before any head, and completes others; ``rush_requests_total`` (from
``--metrics``) and the access log's lines both grow by the number of
requests made, and the cut ones show ``-`` (no head went out) or the
status that went out. tests/differential/test_diff_cancel.py compares the
same with hypercorn's access log."""

from __future__ import annotations

import re
import signal
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

import hpack
import httpx
import pytest
from h2_raw import (
    CANCEL,
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    RST_STREAM,
    RawH2,
    frame,
    settings,
)
from support import GUARD_TIMEOUT, RushServer, ServerFactory, free_port, wait_for, write_localhost_pki

APP = "tests.differential.apps.cancel_app:app"
LINE = re.compile(r'"GET (/\w+) HTTP/2" (\S+) (\d+)$')
ANY_LINE = re.compile(r'"GET (/\w+) HTTP/(?:1\.1|2)" (\S+) (\d+)$')


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("cancelpki"))


def request(path: str) -> list[tuple[bytes, bytes]]:
    return [(b":method", b"GET"), (b":scheme", b"https"), (b":path", path.encode()), (b":authority", b"localhost")]


def h2_requests_total(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=GUARD_TIMEOUT).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('rush_requests_total{protocol="h2"}')
    )


def none_class_count(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=GUARD_TIMEOUT).text
    prefix = 'rush_request_duration_seconds_count{status="none"}'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


def access_lines(server: RushServer) -> list[tuple[str, str, int]]:
    found = (LINE.search(line) for line in server.stdout_text().splitlines())
    return [(match[1], match[2], int(match[3])) for match in found if match]


class Peer:
    """One raw HTTP/2 connection; streams opened in order, answers collected."""

    def __init__(self, server: RushServer, tls: ssl.SSLContext | None) -> None:
        self.raw = RawH2(server.port, tls=tls)
        self.encoder = hpack.Encoder()
        self.next_id = 1
        self.bodies: dict[int, bytes] = {}
        self.ended: set[int] = set()

    def open(self, path: str) -> int:
        stream = self.next_id
        self.next_id += 2
        self.raw.send(frame(HEADERS, END_STREAM | END_HEADERS, stream, self.encoder.encode(request(path))))
        return stream

    def reset(self, stream: int) -> None:
        self.raw.send(frame(RST_STREAM, 0, stream, CANCEL.to_bytes(4, "big")))

    def read_until(self, done: Callable[[], bool], what: str) -> None:
        for _ in range(10_000):
            if done():
                return
            got = self.raw.read_frame()
            assert got is not None, f"the connection closed waiting for {what}"
            if got.kind == DATA:
                self.bodies[got.stream] = self.bodies.get(got.stream, b"") + got.payload
            if got.kind == RST_STREAM or (got.flags & END_STREAM and got.kind in (DATA, HEADERS)):
                self.ended.add(got.stream)
        raise AssertionError(f"no {what} after 10,000 frames")

    def get(self, path: str) -> bytes:
        stream = self.open(path)
        self.read_until(lambda: stream in self.ended, f"the answer to {path}")
        return self.bodies.get(stream, b"")


@pytest.mark.parametrize("transport", ["h2c", "tls"])
def test_cancelled_streams_are_logged_and_counted_once(
    rush_server: ServerFactory, pki: dict[str, Path], transport: str
) -> None:
    metrics_port = free_port()
    args = ["--http", "auto", "--workers", "1", "--access-log", "--metrics", f"127.0.0.1:{metrics_port}"]
    tls = None
    if transport == "tls":
        args += ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])]
        tls = ssl.create_default_context(cafile=str(pki["ca"]))
        tls.set_alpn_protocols(["h2"])
    server = rush_server(APP, *args)
    before, none_before = h2_requests_total(metrics_port), none_class_count(metrics_port)
    peer = Peer(server, tls)
    started = int(peer.get("/started"))
    rounds = 3
    for _ in range(rounds):
        # Mid-response: a 200 head and data went out.
        streaming = peer.open("/stream")
        peer.read_until(lambda streaming=streaming: streaming in peer.bodies, "the stream's first event")
        # Before any head: one app waits on the client, one is busy elsewhere.
        waiting, slow = peer.open("/wait"), peer.open("/slow")
        started += 3
        wait_for(lambda started=started: int(peer.get("/started")) >= started, "the apps started")
        for stream in (streaming, waiting, slow):
            peer.reset(stream)
    assert peer.get("/ok") == b"ok"
    # Every request made: the cut ones, /ok, and each /started poll.
    polls = sum(1 for body in peer.bodies.values() if body.isdigit())
    made = 3 * rounds + 1 + polls

    def settled() -> list[tuple[str, str, int]] | None:
        lines = access_lines(server)
        return lines if len(lines) >= made else None

    lines = wait_for(settled, f"{made} access-log lines")
    assert len(lines) == made, lines
    assert h2_requests_total(metrics_port) - before == made
    by_path: dict[str, list[str]] = {}
    for path, status, _ in lines:
        by_path.setdefault(path, []).append(status)
    assert by_path["/stream"] == ["200"] * rounds
    assert by_path["/wait"] == ["-"] * rounds
    assert by_path["/slow"] == ["-"] * rounds
    assert all(length > 0 for path, _, length in lines if path == "/stream")
    assert none_class_count(metrics_port) - none_before == 2 * rounds
    peer.raw.close()


@pytest.mark.parametrize("protocol", ["http/1.1", "h2"])
def test_a_client_that_stops_reading_is_logged_once(rush_server: ServerFactory, protocol: str) -> None:
    """A client that never reads a long response: the worker gives up after
    --send-timeout (over HTTP/1.1 it closes the connection, over HTTP/2 it
    resets the stream whose window never opens) and the request has its one
    line, with the status that went out."""
    server = rush_server(APP, "--http", "auto", "--workers", "1", "--access-log", "--send-timeout", "1")

    def big_lines() -> list[tuple[str, str]]:
        found = (ANY_LINE.search(line) for line in server.stdout_text().splitlines())
        return [(match[2], match[3]) for match in found if match and match[1] == "/big"]

    if protocol == "h2":
        with RawH2(server.port, settings((INITIAL_WINDOW_SIZE, 0))) as peer:
            peer.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, hpack.Encoder().encode(request("/big"))))
            for _ in range(1000):
                got = peer.read_frame()
                assert got is not None, "the connection closed"
                if got.kind == RST_STREAM and got.stream == 1:
                    break
            else:
                raise AssertionError("the stream was never reset")
            lines = wait_for(big_lines, "the line of the reset stream")
    else:
        with socket.socket() as client:
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.connect(("127.0.0.1", server.port))
            client.sendall(b"GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
            lines = wait_for(big_lines, "the line of the dropped connection")
    assert len(lines) == 1 and lines[0][0] == "200", lines
    assert int(lines[0][1]) > 0
    assert len(big_lines()) == 1


def test_requests_cut_at_the_drain_deadline_are_logged(rush_server: ServerFactory) -> None:
    """SIGTERM with a long poll in flight over HTTP/2 and a busy app over
    HTTP/1.1: --graceful-timeout passes, the worker closes both connections
    (`close_all`), and each request has its line with `-` (no head went
    out) before the worker exits."""
    server = rush_server(APP, "--http", "auto", "--workers", "1", "--access-log", "--graceful-timeout", "1")
    with RawH2(server.port) as peer, socket.create_connection(("127.0.0.1", server.port)) as client:
        peer.send(frame(HEADERS, END_STREAM | END_HEADERS, 1, hpack.Encoder().encode(request("/wait"))))
        client.sendall(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
        with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as probe:
            wait_for(lambda: int(probe.get("/started").text) >= 2, "both apps running")
        server.stop(signal.SIGTERM)
    lines = [match.groups() for match in map(ANY_LINE.search, server.stdout_text().splitlines()) if match]
    cut = sorted((path, status) for path, status, _ in lines if path in ("/wait", "/slow"))
    assert cut == [("/slow", "-"), ("/wait", "-")], lines


def test_a_dispatched_app_whose_body_stalls_is_logged_with_its_408(rush_server: ServerFactory) -> None:
    """An ASGI app reading its request body as it comes, whose client stops
    sending: --body-timeout answers 408 for it, and that is its one line."""
    server = rush_server(APP, "--http", "auto", "--workers", "1", "--access-log", "--body-timeout", "1")
    head = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/wait"), (b":authority", b"localhost")]
    with RawH2(server.port) as peer:
        peer.send(frame(HEADERS, END_HEADERS, 1, hpack.Encoder().encode(head)))
        peer.send(frame(DATA, 0, 1, b"part"))
        for _ in range(1000):
            got = peer.read_frame()
            assert got is not None, "the connection closed"
            if got.kind == HEADERS and got.stream == 1:
                assert got.status == 408
                break
        else:
            raise AssertionError("no answer")
        lines = wait_for(
            lambda: [line for line in server.stdout_text().splitlines() if '"POST /wait HTTP/2"' in line],
            "the line of the stalled request",
        )
    assert len(lines) == 1 and lines[0].endswith(" 408 0"), lines


def test_a_dispatched_app_whose_body_is_too_large_is_logged_with_its_413(rush_server: ServerFactory) -> None:
    """An ASGI app reading its request body as it comes, sent more than
    --max-body-size without a length: rush answers 413 for it, and that is
    its one line."""
    server = rush_server(APP, "--http", "auto", "--workers", "1", "--access-log", "--max-body-size", "1000")
    head = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", b"/wait"), (b":authority", b"localhost")]
    with RawH2(server.port) as peer:
        peer.send(frame(HEADERS, END_HEADERS, 1, hpack.Encoder().encode(head)))
        peer.send(frame(DATA, 0, 1, b"x" * 4000))
        for _ in range(1000):
            got = peer.read_frame()
            assert got is not None, "the connection closed"
            if got.kind == HEADERS and got.stream == 1:
                assert got.status == 413
                break
        else:
            raise AssertionError("no answer")
        lines = wait_for(
            lambda: [line for line in server.stdout_text().splitlines() if '"POST /wait HTTP/2"' in line],
            "the line of the refused request",
        )
    assert len(lines) == 1 and lines[0].endswith(" 413 0"), lines
