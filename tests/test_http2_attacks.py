"""The HTTP/2 attack family against a running ``rush --http auto`` over real
sockets (crates/rush-h2/tests/attacks.rs has the same attacks against the
protocol layer in memory): Rapid Reset, CONTINUATION floods, an HPACK bomb,
SETTINGS/PING and empty-DATA floods, a client that never opens its window,
and more streams than SETTINGS_MAX_CONCURRENT_STREAMS.

The attacker is a raw peer (h2_raw.py: frames by hand). Each test checks
that the attack is stopped the way RFC 9113 and the layer's limits say
(GOAWAY ENHANCE_YOUR_CALM, RST_STREAM, a refused stream, reading stopped),
that the worker survived it (the same pid answers after), and that a normal
client on another connection is answered; during Rapid Reset, a normal
client is answered throughout the flood.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable, Iterator

import httpx
import pytest
from h2_raw import (
    CANCEL,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    GOAWAY,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    PING,
    PROTOCOL_ERROR,
    REFUSED_STREAM,
    RST_STREAM,
    WINDOW_UPDATE,
    Frame,
    RawH2,
    frame,
    hpack_integer,
    hpack_string,
    request_block,
    settings,
)
from support import GUARD_TIMEOUT, RushServer, ServerFactory, rss_kib

APP = "tests.apps.h2_hostile:app"


@pytest.fixture
def server(rush_server: ServerFactory) -> Iterator[RushServer]:
    yield rush_server(APP, "--http", "auto", "--send-timeout", "2")


def h2_client(server: RushServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT)


def pid_over_h2(server: RushServer) -> int:
    """A normal client on a new connection: the worker's pid."""
    with h2_client(server) as client:
        answer = client.get("/pid")
    assert answer.status_code == 200 and answer.http_version == "HTTP/2"
    return int(answer.text)


def hits(server: RushServer) -> int:
    with h2_client(server) as client:
        return int(client.get("/hits").text)


class NormalClient:
    """A client asking for /pid over its own HTTP/2 connection, request after
    request, until stopped; every answer must be the worker's pid.
    ``make_client`` makes its httpx client (h2c to ``server`` by default)."""

    def __init__(self, server: RushServer, pid: int, make_client: Callable[[], httpx.Client] | None = None) -> None:
        self.pid = pid
        self.make_client = make_client or (lambda: h2_client(server))
        self.answered = 0
        self.failure: BaseException | None = None
        self.stopping = threading.Event()
        self.first = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.first.wait(GUARD_TIMEOUT), "the normal client got no first answer"

    def _run(self) -> None:
        try:
            with self.make_client() as client:
                while not self.stopping.is_set():
                    answer = client.get("/pid")
                    assert answer.status_code == 200 and answer.http_version == "HTTP/2", answer
                    assert int(answer.text) == self.pid, answer
                    self.answered += 1
                    self.first.set()
        except BaseException as error:  # noqa: BLE001 - reported by stop()
            self.failure = error
            self.first.set()

    def stop(self) -> int:
        self.stopping.set()
        self.thread.join(GUARD_TIMEOUT)
        assert not self.thread.is_alive(), "the normal client hung"
        if self.failure is not None:
            raise AssertionError(f"the normal client failed after {self.answered} answers") from self.failure
        return self.answered


def read_body(client: RawH2, stream: int) -> bytes:
    """The body of ``stream``'s answer (other streams' frames are skipped;
    no GOAWAY and no reset of it may come first)."""
    body = b""
    while True:
        got = client.read_frame()
        assert got is not None and got.kind != GOAWAY, got
        assert not (got.kind == RST_STREAM and got.stream == stream), got
        if got.kind == DATA and got.stream == stream:
            body += got.payload
            if got.flags & END_STREAM:
                return body


def read_ready_frames(client: RawH2, frames: list[Frame]) -> bool:
    """Adds the frames the server has sent so far (without waiting) to
    ``frames``; True once one of them is a GOAWAY."""
    while not client.closed and select.select([client.sock], [], [], 0)[0]:
        try:
            client.received(client.sock.recv(65536))
        except ConnectionResetError:
            client.received(b"")
        while (got := client.buffered_frame()) is not None:
            frames.append(got)
    return any(got.kind == GOAWAY for got in frames)


def survived(server: RushServer, pid: int) -> None:
    """The worker that was attacked answers a normal client afterwards."""
    assert pid_over_h2(server) == pid
    server.assert_running("after the attack")


# ---------------------------------------------------------------------------
# Rapid Reset (CVE-2023-44487)


@pytest.mark.parametrize("burst", [True, False], ids=["one-burst", "pair-by-pair"])
def test_rapid_reset_gets_goaway_while_a_normal_client_is_answered(server: RushServer, burst: bool) -> None:
    """Thousands of streams opened and reset at once (in one burst: h2's
    pending-accept limit; a pair per write: rush-h2's peer-reset budget)."""
    pid = pid_over_h2(server)
    normal = NormalClient(server, pid)
    with RawH2(server.port) as attacker:
        block = request_block("/hit")
        pairs = [
            frame(HEADERS, END_HEADERS | END_STREAM, stream, block) + frame(RST_STREAM, 0, stream, CANCEL.to_bytes(4))
            for stream in range(1, 2 * 5000, 2)
        ]
        try:
            if burst:
                attacker.send(b"".join(pairs))
            else:
                for pair in pairs:
                    attacker.send(pair)
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed on us mid-flood: what the test wants
        frames = attacker.frames_until_closed()
    goaway = attacker.goaway(frames)
    assert goaway is not None and goaway.error_code == ENHANCE_YOUR_CALM, frames[-5:]
    assert normal.stop() > 0
    survived(server, pid)
    # Far fewer than the 5000 streams reached the app before the GOAWAY.
    assert hits(server) <= 200


# ---------------------------------------------------------------------------
# CONTINUATION floods (CVE-2024-27316 family)


@pytest.mark.parametrize("empty", [False, True], ids=["fields", "empty"])
def test_a_header_block_that_never_ends_is_stopped(server: RushServer, empty: bool) -> None:
    pid = pid_over_h2(server)
    with RawH2(server.port) as attacker:
        attacker.send(frame(HEADERS, END_STREAM, 1, request_block("/hit")))
        fragment = b"" if empty else b"\x00" + hpack_string(b"x-a") + hpack_string(b"a" * 100)
        batch = frame(CONTINUATION, 0, 1, fragment) * 100
        sent = 0
        frames: list[Frame] = []
        try:
            # After its GOAWAY the server drains what still comes for a
            # while (so that the GOAWAY is read, not lost to a reset).
            while sent < 1_000_000 and not read_ready_frames(attacker, frames):
                attacker.send(batch)
                sent += 100
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert sent < 1_000_000, "a million CONTINUATION frames were sent with no GOAWAY"
        frames += attacker.frames_until_closed()
    goaway = attacker.goaway(frames)
    assert goaway is not None and goaway.error_code in (ENHANCE_YOUR_CALM, PROTOCOL_ERROR), frames[-5:]
    survived(server, pid)
    assert hits(server) == 0


# ---------------------------------------------------------------------------
# HPACK bomb


def test_an_hpack_bomb_is_refused_before_the_app(server: RushServer) -> None:
    """One 4000-byte field put in the decoder's table, then referenced a
    thousand times by one-byte indexes: 4 MB of fields from 5 KB of block,
    far past the 32 KiB header list size."""
    pid = pid_over_h2(server)
    block = request_block("/hit") + b"\x40" + hpack_string(b"x-bomb") + hpack_integer(4000, 7) + b"b" * 4000
    block += bytes([0x80 | 62]) * 1000
    with RawH2(server.port) as attacker:
        attacker.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, block))
        # The refusal: 431 on the stream, a reset, or GOAWAY; then a request of the same connection.
        refused = None
        while refused is None:
            got = attacker.read_frame()
            assert got is not None, "closed without a refusal"
            if (got.stream == 1 and got.kind in (HEADERS, RST_STREAM)) or got.kind == GOAWAY:
                refused = got
        if refused.kind == HEADERS:
            assert refused.status == 431, refused.fields
    survived(server, pid)
    assert hits(server) == 0


# ---------------------------------------------------------------------------
# SETTINGS, PING and empty DATA floods (CVE-2019-9512, 9515, 9518)


@pytest.mark.parametrize("flood", ["ping", "settings"])
def test_a_flood_from_a_peer_that_never_reads_stops_the_reading(server: RushServer, flood: str) -> None:
    """Every PING and SETTINGS wants an answer; a peer that never reads
    them makes the server stop reading it (its input and output bounds),
    so the flood meets a full socket instead of growing the worker, until
    --send-timeout (2 s here) without write progress drops the connection."""
    pid = pid_over_h2(server)
    worker_before = rss_kib(pid)
    one = frame(PING, 0, 0, b"abcdefgh") if flood == "ping" else settings()
    batch = one * 1000
    with RawH2(server.port, rcvbuf=4096) as attacker:
        # A send that waits this long means the server stopped reading (a
        # guard: a server that reads on is caught by the byte cap below).
        attacker.sock.settimeout(3)
        sent = 0
        cap = 512 * 1024 * 1024
        try:
            while sent < cap:
                attacker.send(batch)
                sent += len(batch)
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            pass  # reading stopped, or the connection was dropped
        assert sent < cap, f"the server read {sent} bytes of {flood} frames from a peer that never reads"
        survived(server, pid)
        assert rss_kib(pid) - worker_before < 32 * 1024, "the flood grew the worker"


def test_an_empty_data_flood_gets_goaway(server: RushServer) -> None:
    pid = pid_over_h2(server)
    with RawH2(server.port) as attacker:
        attacker.send(frame(HEADERS, END_HEADERS, 1, request_block("/drain", "POST")))
        sent = 0
        frames: list[Frame] = []
        try:
            while sent < 1_000_000 and not read_ready_frames(attacker, frames):
                attacker.send(frame(DATA, 0, 1) * 100)
                sent += 100
        except (BrokenPipeError, ConnectionResetError):
            pass
        assert sent < 1_000_000
        frames += attacker.frames_until_closed()
    goaway = attacker.goaway(frames)
    assert goaway is not None and goaway.error_code == ENHANCE_YOUR_CALM, frames[-5:]
    survived(server, pid)


# ---------------------------------------------------------------------------
# Slow read (CVE-2019-9517)


def test_a_client_that_never_opens_its_window_is_bounded(server: RushServer) -> None:
    """Clients that announce a zero window and never send WINDOW_UPDATE, each
    asking for 8 MiB the app streams in 64 KiB parts: the app is paused on
    the stream's queue (the worker does not hold 8 MiB per client), and the
    stream is reset (CANCEL) once --send-timeout (2 s here) passes without
    progress, or the connection closed."""
    pid = pid_over_h2(server)
    worker_before = rss_kib(pid)
    clients = [RawH2(server.port, settings((INITIAL_WINDOW_SIZE, 0))) for _ in range(20)]
    try:
        for client in clients:
            client.send(frame(HEADERS, END_HEADERS | END_STREAM, 1, request_block(f"/big?size={8 << 20}")))
        for client in clients:
            ended = None
            while ended is None:
                got = client.read_frame()
                if got is None or (got.kind == RST_STREAM and got.stream == 1) or got.kind == GOAWAY:
                    ended = got or "closed"
                assert got is None or got.kind != DATA, "data past a zero window"
            if ended != "closed":
                assert ended.kind == GOAWAY or ended.error_code == CANCEL, ended
        grown = rss_kib(pid) - worker_before
        assert grown < 32 * 1024, f"the worker grew by {grown} KiB for 20 clients that never read"
    finally:
        for client in clients:
            client.close()
    survived(server, pid)


# ---------------------------------------------------------------------------
# Too many concurrent streams


def test_streams_past_the_concurrency_limit_are_refused_and_the_connection_goes_on(server: RushServer) -> None:
    """128 open streams (SETTINGS_MAX_CONCURRENT_STREAMS), then 10 more:
    each of those gets RST_STREAM(REFUSED_STREAM), no GOAWAY, and the
    connection serves a new stream once one ends."""
    pid = pid_over_h2(server)
    with RawH2(server.port) as client:
        block = request_block("/drain", "POST")
        client.send(b"".join(frame(HEADERS, END_HEADERS, stream, block) for stream in range(1, 2 * 138, 2)))
        refused = set()
        while len(refused) < 10:
            got = client.read_frame()
            assert got is not None and got.kind != GOAWAY, got
            if got.kind == RST_STREAM:
                assert got.error_code == REFUSED_STREAM, got
                refused.add(got.stream)
        assert refused == set(range(2 * 128 + 1, 2 * 138, 2))
        # One stream ends its body and is answered; a new stream then fits.
        client.send(frame(DATA, END_STREAM, 1))
        assert read_body(client, 1) == b"drained"
        client.send(frame(HEADERS, END_HEADERS | END_STREAM, 301, request_block("/pid")))
        assert read_body(client, 301) == str(pid).encode()
    survived(server, pid)


# ---------------------------------------------------------------------------
# The worker-wide output budget (--max-worker-output) over HTTP/2


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def h2_output_growth_kib(rush_server: ServerFactory, *flags: str, wide_windows: bool = False) -> int:
    """How much the worker's peak RSS grows while 300 HTTP/2 connections each
    open 10 streams for 64 KiB answers and never read (4 KiB receive
    buffers), with their windows opened wide (the answers can all go to
    the output buffers) or left at the default 64 KiB (they wait in the
    streams' queues); a fresh client is answered beside them."""
    server = rush_server(APP, "--http", "auto", *flags)
    pid = pid_over_h2(server)
    before = peak_rss_kib(pid)
    wide = settings((INITIAL_WINDOW_SIZE, 2**31 - 1))
    wide += frame(WINDOW_UPDATE, 0, 0, (2**31 - 1 - 65535).to_bytes(4, "big"))
    block = request_block(f"/big?size={64 * 1024}")
    streams = b"".join(frame(HEADERS, END_HEADERS | END_STREAM, stream, block) for stream in range(1, 20, 2))
    clients = [RawH2(server.port, wide if wide_windows else None, rcvbuf=4096) for _ in range(300)]
    try:
        for client in clients:
            client.send(streams)
        for _ in range(2):
            assert pid_over_h2(server) == pid
        server.assert_running()
        return peak_rss_kib(pid) - before
    finally:
        for client in clients:
            client.close()


def test_http2_answers_count_toward_the_worker_output_budget(rush_server: ServerFactory) -> None:
    """The streams' queued answers count toward --max-worker-output, and
    past it a connection that holds much takes no new request until its
    client reads: with a 2 MiB budget the worker holds about 64 KiB per
    connection (and what HTTP/2 itself keeps per connection), with 1 GiB
    every answer."""
    bounded = h2_output_growth_kib(rush_server, "--max-worker-output", "2M")
    unbounded = h2_output_growth_kib(rush_server, "--max-worker-output", "1G")
    print(f"\nRSS growth for 300 h2 clients that never read: {bounded} KiB with a 2 MiB budget, {unbounded} with 1 GiB")
    # The budget, plus per connection 64 KiB queued, one answer on its way, and HTTP/2's own state.
    assert bounded < 64 * 1024
    # Without the budget every answer is held: the test measures the bound.
    assert unbounded > 2 * bounded


def test_300_h2_clients_with_open_windows_that_never_read_stay_within_the_default_budget(
    rush_server: ServerFactory,
) -> None:
    growth = h2_output_growth_kib(rush_server, wide_windows=True)
    print(f"\nRSS growth for 300 h2 clients x 10 streams, windows open, that never read: {growth // 1024} MiB")
    assert growth <= (64 + 32) * 1024, f"{growth // 1024} MiB"


@pytest.mark.xfail(
    reason="measured 108 MiB (200 before HTTP/2 output counted toward the budget): the 64 MiB budget, "
    "about 64 KiB per connection past it, and about 40 KB of HTTP/2 state per connection (h2's own buffers), "
    "which no budget counts; issue 22's target for HTTP/1.1 is the budget plus 32 MiB (96 MiB)",
    strict=False,
)
def test_300_h2_clients_with_default_windows_that_never_read_stay_within_the_default_budget(
    rush_server: ServerFactory,
) -> None:
    growth = h2_output_growth_kib(rush_server)
    print(f"\nRSS growth for 300 h2 clients x 10 streams, default windows, that never read: {growth // 1024} MiB")
    assert growth <= (64 + 32) * 1024, f"{growth // 1024} MiB"
