"""Every bound rush enforces, at its boundary: --max-request-line (414),
--max-headers and --max-head-size (431), --max-body-size (413, decided from
Content-Length before the body is sent, and for chunked bodies as they
decode), --max-connections; and every deadline: --header-timeout (a stalled or
dripping head gets 408 and a close), --body-timeout, --keep-alive-timeout
(idle connections close), --send-timeout (a client that stops reading is
dropped). Also that slow clients, on either side, do not hold up others and
do not make the worker's memory grow.
"""

from __future__ import annotations

import select
import socket
import struct
import time

import pytest
from support import (
    GUARD_TIMEOUT,
    RushServer,
    ServerFactory,
    chunked,
    parse_responses,
    request,
    rss_kib,
    socket_fd_count,
    wait_for,
)

MAX_REQUEST_LINE = 100
MAX_HEAD = 400
MAX_HEADERS = 8
MAX_BODY = 100


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory) -> RushServer:
    """Small limits and one-second deadlines."""
    return module_servers(
        "basic",
        "--max-request-line",
        MAX_REQUEST_LINE,
        "--max-head-size",
        MAX_HEAD,
        "--max-headers",
        MAX_HEADERS,
        "--max-body-size",
        MAX_BODY,
        "--header-timeout",
        "1",
        "--body-timeout",
        "1",
        "--keep-alive-timeout",
        "1",
    )


def status_of(server: RushServer, data: bytes) -> tuple[int, bool]:
    """Sends one request; returns its status and whether the connection was then closed."""
    with server.connect() as connection:
        connection.send(data)
        response = connection.read_response()
        if not response.closes:
            return response.status, False
        result = connection.read_until_close()
        assert result.responses == [], result
        return response.status, True


# ---------------------------------------------------------------------------
# Sizes


@pytest.mark.parametrize(
    ("length", "status"), [(MAX_REQUEST_LINE - 1, 200), (MAX_REQUEST_LINE, 200), (MAX_REQUEST_LINE + 1, 414)]
)
def test_max_request_line(server: RushServer, length: int, status: int) -> None:
    line = "GET /echo?" + "a" * (length - len("GET /echo? HTTP/1.1")) + " HTTP/1.1"
    assert len(line) == length
    result = status_of(server, line.encode() + b"\r\nHost: test\r\n\r\n")
    assert result == (status, status != 200)


def test_request_line_over_the_limit_is_refused_before_it_ends(server: RushServer) -> None:
    # No line ending yet: the server need not wait for one to know.
    assert status_of(server, b"GET /" + b"a" * (MAX_REQUEST_LINE + 10)) == (414, True)


@pytest.mark.parametrize(("fields", "status"), [(MAX_HEADERS - 1, 200), (MAX_HEADERS, 200), (MAX_HEADERS + 1, 431)])
def test_max_headers(server: RushServer, fields: int, status: int) -> None:
    # request() adds Host, which counts as a field.
    data = request("GET", "/", [(f"X-{number}", "v") for number in range(fields - 1)])
    assert status_of(server, data) == (status, status != 200)


@pytest.mark.parametrize(("size", "status"), [(MAX_HEAD - 1, 200), (MAX_HEAD, 200), (MAX_HEAD + 1, 431)])
def test_max_head_size(server: RushServer, size: int, status: int) -> None:
    padding = size - len(request("GET", "/", [("X-Pad", "")]))
    data = request("GET", "/", [("X-Pad", "p" * padding)])
    assert len(data) == size  # the whole head, final empty line included
    assert status_of(server, data) == (status, status != 200)


def test_head_over_the_limit_is_refused_before_it_ends(server: RushServer) -> None:
    assert status_of(server, b"GET / HTTP/1.1\r\nHost: test\r\nX-Pad: " + b"p" * MAX_HEAD) == (431, True)


@pytest.mark.parametrize(("size", "status"), [(MAX_BODY, 200), (MAX_BODY + 1, 413)])
def test_max_body_size_with_content_length(server: RushServer, size: int, status: int) -> None:
    assert status_of(server, request("POST", "/echo", body=b"b" * size)) == (status, status != 200)


def test_content_length_over_the_limit_is_refused_before_the_body_is_sent(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 1000000\r\n\r\n")
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [413]
    assert result.responses[0].closes


@pytest.mark.parametrize(("size", "status"), [(MAX_BODY, 200), (MAX_BODY + 1, 413)])
def test_max_body_size_with_chunked_body(server: RushServer, size: int, status: int) -> None:
    data = request(
        "POST", "/echo", [("Transfer-Encoding", "chunked")], chunked(b"a" * (size - 1), b"z"), content_length=False
    )
    assert status_of(server, data) == (status, status != 200)


def test_chunked_body_over_the_limit_is_refused_before_it_ends(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(
            b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
            + b"%x\r\n" % (MAX_BODY * 10)
            + b"a" * (MAX_BODY + 1)
        )
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [413]


def test_size_suffixes(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--max-body-size", "1K")
    assert status_of(server, request("POST", "/echo", body=b"k" * 1024)) == (200, False)
    assert status_of(server, request("POST", "/echo", body=b"k" * 1025)) == (413, True)


def test_max_connections_holds_further_clients_until_one_leaves(rush_server: ServerFactory) -> None:
    # Two connections busy in the middle of a request (not idle, so not
    # closed to make room): a third client waits until one leaves.
    server = rush_server("basic", "--max-connections", "2")
    worker = server.single_worker()
    baseline = socket_fd_count(worker)
    first, second = server.connect(), server.connect()
    for connection in (first, second):
        connection.send(b"GET / HTTP/1.1\r\nHost: test\r\n")
    wait_for(lambda: socket_fd_count(worker) == baseline + 2, "both busy connections accepted")
    with server.connect() as third:
        third.send(request("GET", "/echo?id=third"))
        # The kernel queues the third connection; the worker does not take it.
        assert third.nothing_arrives(0.5)
        assert socket_fd_count(worker) == baseline + 2
        first.close()
        response = third.read_response()
        assert response.status == 200
        assert dict(response.json()["query"]) == {"id": "third"}
    second.send(b"\r\n")
    assert second.read_response().status == 200
    second.close()


# ---------------------------------------------------------------------------
# Deadlines


def test_stalled_head_gets_408_and_a_close(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"GET / HTTP/1.1\r\nHost: test\r\n")
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [408]
    assert result.responses[0].closes


def test_slowloris_dripping_a_head_gets_408(server: RushServer) -> None:
    """The header deadline counts from the first byte: sending a byte now and
    then does not extend it."""
    head = b"GET / HTTP/1.1\r\nHost: test\r\nX-Drip: " + b"d" * 200
    with server.connect() as connection:
        deadline = time.monotonic() + GUARD_TIMEOUT
        for byte in head:
            # Pace the drip at 0.1s; stop as soon as the server says something.
            readable, _, _ = select.select([connection.sock], [], [], 0.1)
            if readable or time.monotonic() > deadline:
                break
            connection.send(bytes([byte]))
        else:
            pytest.fail("the server waited for the whole drip (20s) without answering")
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [408]


def test_a_slowloris_that_drips_on_after_its_408_reads_it_then_eof_not_a_reset(server: RushServer) -> None:
    """After the 408 the server shuts its write side and discards what the
    client still sends (a lingering close), so the client reads the whole
    answer and then EOF. Closing at once made the kernel answer the next
    dripped byte with an RST, which the client saw as ECONNRESET."""
    sock = socket.create_connection(server.address, timeout=GUARD_TIMEOUT)
    with sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: test\r\nX-Drip: d")
        # The 408 is sent and the server's FIN has arrived (POLLRDHUP).
        poller = select.poll()
        poller.register(sock, select.POLLRDHUP)
        assert poller.poll(GUARD_TIMEOUT * 1000), "no 408 and FIN"
        sock.sendall(b"ddd")  # the drip goes on, unaware
        received = b""
        while chunk := sock.recv(65536):  # ConnectionResetError fails the test
            received += chunk
        responses, rest = parse_responses(received)
        assert [response.status for response in responses] == [408] and rest == b""
        # The server still takes (and discards) what comes: no reset, which
        # an uploading client would report instead of the 408. (Closed at
        # once, the server's kernel answered the first drip with an RST, and
        # this send fails with EPIPE.)
        sock.sendall(b"ddd")


def test_stalled_body_gets_408_and_a_close(server: RushServer) -> None:
    before = _calls(server)
    with server.connect() as connection:
        connection.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nabc")
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [408]
    assert result.responses[0].closes
    assert _calls(server) == before


def test_408_response_has_a_date_header(server: RushServer) -> None:
    # RFC 9110 6.6.1: an origin server with a clock MUST send Date in 4xx responses.
    with server.connect() as connection:
        connection.send(b"GET / HTTP/1.1\r\n")
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [408]
    assert result.responses[0].header("date") is not None, result.responses[0].raw_head


def test_keep_alive_deadline_restarts_after_every_response(rush_server: ServerFactory) -> None:
    """A busy connection outlives the keep-alive timeout: only idleness counts."""
    server = rush_server("basic", "--keep-alive-timeout", "2")
    with server.connect() as connection:
        for number in range(14):  # about 2.8s in all, never idle for more than 0.2s
            connection.send(request("GET", f"/echo?id={number}"))
            assert connection.read_response().status == 200
            time.sleep(0.2)  # pacing the client, not synchronisation
        connection.assert_closed()  # and once idle, it is closed


def test_idle_keep_alive_connection_is_closed_without_a_word(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/"))
        assert connection.read_response().status == 200
        connection.assert_closed()


def test_connection_that_never_sends_is_closed(server: RushServer) -> None:
    with server.connect() as connection:
        connection.assert_closed()


def _calls(server: RushServer) -> int:
    with server.connect() as connection:
        connection.send(request("GET", "/count", [("Connection", "close")]))
        return connection.read_response().json()["calls"]


# ---------------------------------------------------------------------------
# Slow clients


def _stuff_without_reading(connection_socket: socket.socket, data: bytes) -> int:
    """Sends ``data`` repeatedly until the socket takes no more; returns the bytes sent."""
    connection_socket.setblocking(False)
    sent = 0
    deadline = time.monotonic() + GUARD_TIMEOUT
    while time.monotonic() < deadline:
        try:
            sent += connection_socket.send(data)
        except BlockingIOError:
            # Give the server a moment to take more; stop once it no longer does.
            _, writable, _ = select.select([], [connection_socket], [], 0.3)
            if not writable:
                return sent
    raise AssertionError("the server kept reading from a client that never reads its responses")


def test_client_that_never_reads_does_not_block_others_or_grow_memory(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--send-timeout", "60")
    worker = server.single_worker()
    memory_before = rss_kib(worker)
    hog = server.connect(rcvbuf=4096)
    # Each request asks for 256 KiB; the client never reads any of it.
    sent = _stuff_without_reading(hog.sock, request("GET", "/big?size=262144") * 64)
    requests_sent = sent // len(request("GET", "/big?size=262144"))
    assert requests_sent > 8  # well over what fits in socket buffers as responses
    with server.connect() as other:
        for number in range(3):
            other.send(request("GET", f"/echo?id={number}"))
            assert other.read_response().status == 200
    # Answering every request at once would need requests_sent * 256 KiB; the
    # server stops reading the hog instead, so memory stays near where it was.
    grown = rss_kib(worker) - memory_before
    assert grown < 64 * 1024, f"worker RSS grew by {grown} KiB for a client that does not read"
    hog.close()


def test_client_that_stops_reading_is_dropped_after_the_send_timeout(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--send-timeout", "1", "--keep-alive-timeout", "60")
    worker = server.single_worker()
    baseline = socket_fd_count(worker)
    hog = server.connect(rcvbuf=4096)
    hog.send(request("GET", "/big?size=8388608"))
    wait_for(lambda: socket_fd_count(worker) == baseline + 1, "the worker accepting the connection")
    # The worker closes the connection once no write has progressed for a second.
    wait_for(lambda: socket_fd_count(worker) == baseline, "the worker dropping a client that does not read")
    # (Reading the rest now would be slow: the kernel's zero-window probes of
    # the orphaned socket back off. The worker's fd count already says it all.)
    hog.close()
    # The worker is fine.
    with server.connect() as connection:
        connection.send(request("GET", "/"))
        assert connection.read_response().status == 200


def test_slow_sender_does_not_block_other_clients(server: RushServer) -> None:
    with server.connect() as slow:
        slow.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 6\r\n\r\nha")
        with server.connect() as other:
            other.send(request("GET", "/echo?id=other"))
            assert other.read_response().status == 200
        slow.send(b"lf")
        with server.connect() as other:
            other.send(request("GET", "/"))
            assert other.read_response().status == 200
        slow.send(b"!!")
        assert slow.read_response().json()["body"] == "half!!"


def test_half_sent_head_does_not_block_other_clients(server: RushServer) -> None:
    with server.connect() as slow:
        slow.send(b"GET /echo?id=slow HTTP/1.1\r\nHo")
        with server.connect() as other:
            other.send(request("GET", "/echo?id=other"))
            assert other.read_response().status == 200
        slow.send(b"st: test\r\n\r\n")
        assert slow.read_response().status == 200


# ---------------------------------------------------------------------------
# Resources


def test_connections_are_released_however_they_end(rush_server: ServerFactory) -> None:
    """After normal closes, server-side closes, refusals, resets and clients
    vanishing mid-request, the worker holds no socket more than it started with."""
    server = rush_server("basic", "--keep-alive-timeout", "60", "--header-timeout", "60", "--body-timeout", "60")
    worker = server.single_worker()
    baseline = socket_fd_count(worker)
    for _ in range(5):
        with server.connect() as connection:  # the client closes after a response
            connection.send(request("GET", "/"))
            connection.read_response()
        with server.connect() as connection:  # the server closes (Connection: close)
            connection.send(request("GET", "/", [("Connection", "close")]))
            connection.read_until_close()
        with server.connect() as connection:  # a refusal
            connection.send(b"GET / HTTP/1.1\r\n\r\n")
            connection.read_until_close()
        with server.connect() as connection:  # gone in the middle of a head
            connection.send(b"GET / HTTP/1.1\r\nHo")
        with server.connect() as connection:  # gone in the middle of a body
            connection.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\nabc")
        with server.connect() as connection:  # gone without reading a large response
            connection.send(request("GET", "/big?size=4194304"))
        connection = server.connect()  # a reset
        connection.send(request("GET", "/"))
        connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.close()
    wait_for(lambda: socket_fd_count(worker) == baseline, "the worker to close every finished connection")
    with server.connect() as connection:
        connection.send(request("GET", "/"))
        assert connection.read_response().status == 200


def test_many_concurrent_connections(server: RushServer) -> None:
    connections = []
    try:
        for number in range(200):
            connections.append(server.connect())
            connections[-1].send(request("GET", f"/echo?id={number}"))
        for number, connection in enumerate(connections):
            assert dict(connection.read_response().json()["query"]) == {"id": str(number)}
    finally:
        for connection in connections:
            connection.close()


def test_large_limits_beyond_the_defaults(rush_server: ServerFactory) -> None:
    """Heads of many fields and of many reads' worth of bytes, when allowed."""
    server = rush_server("basic", "--max-headers", "300", "--max-head-size", "300000", "--max-request-line", "100000")
    many = request("GET", "/echo", [(f"X-{number}", str(number)) for number in range(298)])
    big = request("GET", "/echo?q=" + "q" * 90000, [(f"X-Big-{number}", "b" * 1000) for number in range(150)])
    with server.connect() as connection:
        connection.send(many + big)
        first, second = connection.read_responses(2)
    assert len(first.json()["headers"]) == 299
    assert len(second.json()["headers"]) == 151
    assert len(second.json()["query_string"]) == 90002
    too_many = request("GET", "/", [(f"X-{number}", "v") for number in range(300)])
    assert status_of(server, too_many) == (431, True)


def test_idle_keep_alive_connections_make_room_for_new_clients_at_the_cap(rush_server: ServerFactory) -> None:
    # At --max-connections, idle keep-alive clients must not lock a new
    # client out: the longest-idle ones are closed to admit it (as nginx does).
    server = rush_server("basic", "--max-connections", "20", "--keep-alive-timeout", "600")
    idle = []
    try:
        for _ in range(20):
            connection = server.connect()
            connection.send(request("GET", "/"))
            assert connection.read_response().status == 200
            idle.append(connection)
        with server.connect() as newcomer:
            newcomer.send(request("GET", "/"))
            assert newcomer.read_response().status == 200
        # The one closed to make room was the longest idle, and it is logged.
        idle[0].assert_closed()
        server.wait_for_log(r"WARNING.*--max-connections limit")
        with idle[-1] as recent:
            recent.send(request("GET", "/"))
            assert recent.read_response().status == 200
    finally:
        for connection in idle:
            connection.close()
