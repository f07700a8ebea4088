"""A WebSocket connection cannot hold the worker's loop (HTTP/2's floods
are in test_http2_fairness.py): each connection reads at most 256 KiB per
turn of the loop, then waits for the next turn while every other
connection with work has its own.

A WebSocket peer that floods pings and reads every pong fills no queue of
the app's, so nothing but that budget stops the reading. A normal client
on its own connection asks for a page request after request while the
flood runs; the flood stops once that client has had its answers, or at a
cap far beyond what a fair loop needs, and the test asserts that the
answers stopped it. Without the budget the flood ran to its 2 GiB cap
while the normal client got 16 answers; with it, 20 answers came within
15 to 31 MiB of pings.

HTTP/1.1 connections have the same budget (src/http1/drive.rs). No attack
test is here for it: a sender on loopback, even sendfile(2) of a sparse
file, leaves the socket short often enough that the worker's short reads
yield the loop anyway (20 answers came within 128 to 186 MiB of one upload
without the budget, 16 to 48 MiB with it), so such a test would not fail
on the code before the budget. What the budget could break, a large
upload stalling at a turn's end, is what test_uploads.py (2 GB, 200 MB)
and test_tls.py (an upload sent at once over TLS) check.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from pathlib import Path

from support import GUARD_TIMEOUT, Connection, RushServer, ServerFactory
from ws_support import masked_frame, read_head, upgrade_request

WS_APP = "tests.apps.ws_apps:asgi_app"
ANSWERS_DURING = 20
PING_CAP = 2 * 1024**3


class NormalClient:
    """Asks for ``path`` on one keep-alive connection; counts the answers."""

    def __init__(self, server: RushServer, path: str) -> None:
        self.connection = Connection(("127.0.0.1", server.port))
        self.request = f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode()
        self.answered = 0

    def ask(self) -> None:
        self.connection.send(self.request)
        assert self.connection.read_response().status == 200
        self.answered += 1

    def close(self) -> None:
        self.connection.close()


def attack_until_answered(
    normal: NormalClient, start: Callable[[threading.Event], int], after_start: Callable[[], None]
) -> tuple[int, int]:
    """Runs ``start(stop)`` (the attack, returning the bytes it sent) in a
    thread; once ``after_start`` says it is under way, a normal client asks
    until it has ``ANSWERS_DURING`` answers, then stops the attack. Returns
    (bytes sent, answers)."""
    stop = threading.Event()
    sent: list[int] = []
    thread = threading.Thread(target=lambda: sent.append(start(stop)), daemon=True)
    normal.ask()  # connected and answered before the attack begins
    thread.start()
    after_start()
    try:
        while normal.answered <= ANSWERS_DURING and thread.is_alive():
            normal.ask()
    finally:
        stop.set()
        thread.join(GUARD_TIMEOUT)
        normal.close()
    assert not thread.is_alive(), "the attacker hung"
    return sent[0], normal.answered - 1


def send_at_kernel_speed(sock: socket.socket, path: Path, stop: threading.Event, cap: int) -> int:
    """Sends ``path`` over and over with sendfile(2) (no Python in the way,
    so the socket stays full while the server reads), until ``stop`` or
    ``cap`` bytes; returns the bytes sent."""
    sent = 0
    with path.open("rb") as source:
        size = path.stat().st_size
        while sent < cap and not stop.is_set():
            sent += sock.sendfile(source, 0, min(size, cap - sent))
    return sent


def test_a_websocket_ping_flood_does_not_hold_the_loop(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = rush_server(WS_APP)
    connection = Connection(("127.0.0.1", server.port))
    connection.send(upgrade_request("/echo"))
    assert read_head(connection).startswith(b"HTTP/1.1 101"), "no upgrade"
    attacker = connection.sock
    under_way = threading.Event()
    pings = tmp_path / "pings"
    ping = masked_frame(0x9, b"p" * 125)
    pings.write_bytes(ping * (16 * 1024 * 1024 // len(ping)))
    received = [0]

    def read_pongs() -> None:
        # Every pong read, so no output bound ever stops the server's reading.
        try:
            while chunk := attacker.recv(1 << 20):
                received[0] += len(chunk)
        except OSError:
            pass

    reader = threading.Thread(target=read_pongs, daemon=True)
    reader.start()

    def flood(stop: threading.Event) -> int:
        under_way.set()
        return send_at_kernel_speed(attacker, pings, stop, PING_CAP)

    try:
        sent, answers = attack_until_answered(
            NormalClient(server, "/state"), flood, lambda: under_way.wait(GUARD_TIMEOUT)
        )
    finally:
        attacker.shutdown(socket.SHUT_RDWR)
        attacker.close()
        reader.join(GUARD_TIMEOUT)
    assert answers >= ANSWERS_DURING, answers
    assert sent < PING_CAP, f"the flood ran to its cap ({sent} bytes) before {ANSWERS_DURING} answers"
    print(f"\n{answers} answers while {sent // 2**20} MiB of pings arrived ({received[0] // 2**20} MiB of pongs)")
    server.assert_running("after the flood")
