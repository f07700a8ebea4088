"""HTTP/2 keeps HTTP/1.1's promises against one careless or hostile
connection (issue 32): a connection cannot hold the worker's loop, and it
cannot make the worker start more work than it will ever read.

- **A fair loop.** A peer that floods frames carrying nothing (PING,
  SETTINGS, WINDOW_UPDATE, PRIORITY, empty DATA), over h2c or TLS, and
  reads every answer, so that no output bound ever stops the reading, ends
  with GOAWAY(ENHANCE_YOUR_CALM) (nginx's "http2 flood detected" rule: the
  bytes received over 8 times the bytes that carried requests and
  responses, plus 8 MiB), and a normal client on another connection is
  answered while the flood runs (each connection reads at most 256 KiB per
  turn of the loop before the others get theirs).
- **Work bounded before it is made.** A connection whose streams never get
  window (SETTINGS_INITIAL_WINDOW_SIZE 0) opening 100 streams to a
  streaming app starts only as many apps as its share of output holds
  (1 MiB, at most 256 KiB per stream before the app waits); the other
  requests wait, and those whose client is gone before they were
  dispatched are never dispatched.

The attacker is tests/h2_raw.py's raw peer; the app is tests/apps/h2_hostile.py.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import httpx
import pytest
from h2_raw import (
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOODS,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    PING,
    RawH2,
    frame,
    request_block,
    settings,
)
from support import GUARD_TIMEOUT, RushServer, ServerFactory, socket_fd_count, wait_for, write_localhost_pki
from test_http2_attacks import NormalClient

APP = "tests.apps.h2_hostile:app"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("fairpki"))


class Over:
    """How the test reaches the server: h2c, or TLS with ALPN h2."""

    def __init__(self, name: str, pki: dict[str, Path]) -> None:
        self.name, self.pki = name, pki

    def args(self) -> list[str]:
        if self.name == "h2c":
            return []
        return ["--ssl-certfile", str(self.pki["chain"]), "--ssl-keyfile", str(self.pki["key"])]

    def context(self) -> ssl.SSLContext | None:
        return None if self.name == "h2c" else ssl.create_default_context(cafile=str(self.pki["ca"]))

    def raw(self, server: RushServer, initial_settings: bytes | None = None) -> RawH2:
        return RawH2(server.port, initial_settings, tls=self.context())

    def client(self, server: RushServer) -> httpx.Client:
        scheme = "http" if self.name == "h2c" else "https"
        verify: ssl.SSLContext | bool = self.context() or False
        return httpx.Client(
            base_url=f"{scheme}://127.0.0.1:{server.port}",
            http2=True,
            http1=False,
            verify=verify,
            timeout=GUARD_TIMEOUT,
        )


@pytest.fixture(params=["h2c", "tls"])
def over(request: pytest.FixtureRequest, pki: dict[str, Path]) -> Over:
    return Over(request.param, pki)


@pytest.mark.parametrize("kind", list(FLOODS))
def test_a_control_frame_flood_gets_goaway_while_others_are_answered(
    rush_server: ServerFactory, over: Over, kind: str
) -> None:
    server = rush_server(APP, "--http", "auto", *over.args())
    with over.client(server) as client:
        pid = int(client.get("/pid").text)
    normal = NormalClient(server, pid, lambda: over.client(server))
    answered_during = []
    with over.raw(server) as attacker:
        if kind == "empty DATA":
            attacker.send(frame(HEADERS, END_HEADERS, 1, request_block("/drain", "POST")))
        before = normal.answered
        sent, frames = attacker.flood_until_goaway(FLOODS[kind], lambda: answered_during.append(normal.answered))
    answered = normal.stop()
    goaway = next((got for got in frames if got.kind == GOAWAY), None)
    assert goaway is not None, f"closed without GOAWAY after {sent} bytes of {kind}"
    assert goaway.error_code == ENHANCE_YOUR_CALM, goaway
    if kind != "empty DATA":  # h2 itself stops those after a few hundred
        # Not before nginx's allowance: 8 MiB of frames that carry nothing.
        assert sent >= 8 * 1024 * 1024, sent
    if kind != "empty DATA":
        # The flood held no one up: answers kept coming while it ran.
        assert answered_during and answered_during[-1] > before, (before, answered_during[-1:])
    print(f"\n{kind} over {over.name}: GOAWAY after {sent} bytes; {answered - before} normal answers meanwhile")
    with over.client(server) as client:
        assert int(client.get("/pid").text) == pid
    server.assert_running("after the flood")


def started(client: httpx.Client) -> int:
    return int(client.get("/started").text)


def test_connections_that_never_open_their_windows_start_only_their_share(rush_server: ServerFactory) -> None:
    """Three connections whose streams get no window each open 100 streams
    to an app that streams 8 MiB: the app begins only as many answers as
    each connection's share holds (1 MiB, at most 256 KiB a stream before
    its app waits; past the worker's budget, one a connection), not 300.
    When the clients leave, the requests still waiting never begin, even
    though the first close frees the budget the others were held by."""
    server = rush_server(APP, "--http", "auto", "--max-worker-output", "1M")
    with httpx.Client(base_url=server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT) as client:
        assert started(client) == 0
        block = request_block(f"/big?size={8 << 20}")
        requests = b"".join(frame(HEADERS, END_HEADERS | END_STREAM, 2 * i + 1, block) for i in range(100))
        attackers = [RawH2(server.port, settings((INITIAL_WINDOW_SIZE, 0))) for _ in range(3)]
        for attacker in attackers:
            # A PING after the requests: its ACK comes once all of them
            # were read and as many as may start have started.
            attacker.send(requests + frame(PING, 0, 0, b"synced!!"))
            while (got := attacker.read_frame()) is not None:
                if got.kind == PING and got.payload == b"synced!!":
                    break
            assert got is not None, "closed before the PING's ACK"
        began = started(client)
        print(f"\n{began} of 300 streams began on three connections with no window")
        assert 3 <= began <= 8, began
        pid = server.single_worker()
        sockets = socket_fd_count(pid)
        for attacker in attackers:
            attacker.close()
        # Once the worker has closed its side of all three, the requests
        # that waited are gone with them, never begun.
        wait_for(lambda: socket_fd_count(pid) <= sockets - 3, "the worker closing the connections")
        assert started(client) == began
    server.assert_running("after the clients left")
