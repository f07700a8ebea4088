"""One request-body limit (``--max-body-size``) for every interface and both
protocols, counted in bytes received whether or not the request declared a
length (issue 32, item 4).

* A 3 MB body sent without a length (HTTP/1.1 chunked, HTTP/2 DATA with no
  ``content-length``) under ``--max-body-size 1M`` gets a 413 for an ASGI
  app reading it as it comes, a WSGI app and the rush App alike, with one
  413 text over both protocols; it is logged as a refusal (WARNING) and
  never as an error; the worker lives on and answers the next connection.
  The ASGI app is told ``http.disconnect`` and never gets more than the
  limit.
* A declared ``content-length`` past the limit gets the same 413 with the
  head, before any app reads a byte, over both protocols.
* A malformed chunked body under a running ASGI app is a refusal (400,
  WARNING) as it is when the body is collected first, not an ERROR.
* An ASGI app whose response had begun when its body went past the limit
  cannot be answered 413: its HTTP/2 stream is reset (INTERNAL_ERROR, as
  nginx resets a request it ends after its response began), its HTTP/1.1
  connection closed without the final chunk.
* A body of exactly the limit is served, over both protocols, by every
  interface; for ASGI the same as uvicorn (HTTP/1.1) and hypercorn (HTTP/2)
  serve it, the oracles (neither has a body limit of its own to compare).
* ``--max-body-size 0`` is no limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import pytest
from differential.harness import ReferenceServer
from support import GUARD_TIMEOUT, VENV_BIN, RushServer, ServerFactory, clean_environment, wait_for

APP = "tests.apps.body_limit"
LIMIT = 1024 * 1024
TOO_LARGE = 3 * 1000 * 1000
PIECE = 64 * 1024
# The one 413 text, over HTTP/1.1 and HTTP/2.
REFUSAL = b"413 Content Too Large: request body too large\n"
REFUSAL_LOG = r"\[WARNING\] refused a request from 127\.0\.0\.1:\d+: 413 request body too large"
INTERFACES = {"asgi": "asgi", "wsgi": "wsgi", "app": "rush"}


@dataclass
class Answer:
    """What a client saw of one upload."""

    status: int | None
    body: bytes
    # HTTP/2: the stream's RST_STREAM error code, if it was reset.
    reset: int | None = None
    # HTTP/1.1: the connection closed (after the answer, or in its middle).
    closed: bool = False


def h1_upload(server: RushServer, path: str, body: bytes, keep_sending: bool = False) -> Answer:
    """POSTs ``body`` chunked, in pieces, over a new connection, reading
    while it sends; stops sending once an answer arrives (unless
    ``keep_sending``: then only when the server stops reading) and reads on
    until the answer is complete or the connection closes."""
    received = b""
    closed = False
    with socket.create_connection(server.address, timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
        sent = 0
        try:
            while sent <= len(body):
                while not closed and select.select([sock], [], [], 0)[0]:
                    data = sock.recv(65536)
                    received += data
                    closed = not data
                if closed or (received and not keep_sending):
                    break
                piece = body[sent : sent + PIECE]
                # The last piece is the empty chunk that ends the body.
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece) or 1
        except (BrokenPipeError, ConnectionResetError):
            pass
        deadline = time.monotonic() + GUARD_TIMEOUT
        while not closed and not complete_h1(received) and time.monotonic() < deadline:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            received += data
            closed = not data
    head, _, rest = received.partition(b"\r\n\r\n")
    status = int(head.split()[1]) if head.startswith(b"HTTP/1.1 ") else None
    if b"\r\ntransfer-encoding: chunked" in head.lower():
        rest = dechunk(rest)
    return Answer(status, rest, closed=closed)


def complete_h1(data: bytes) -> bool:
    head, found, rest = data.partition(b"\r\n\r\n")
    if not found:
        return False
    length = re.search(rb"(?i)\r\ncontent-length: (\d+)", head)
    if length:
        return len(rest) >= int(length.group(1))
    return rest.endswith(b"0\r\n\r\n")


def dechunk(data: bytes) -> bytes:
    """The chunks' data, as far as it goes (a cut body stays cut)."""
    out = b""
    while data:
        size_line, found, data = data.partition(b"\r\n")
        if not found or not size_line:
            break
        size = int(size_line, 16)
        if size == 0:
            break
        out += data[:size]
        data = data[size + 2 :]
    return out


def h2_upload(
    server: RushServer, path: str, body: bytes, keep_sending: bool = False, declared: int | None = None
) -> Answer:
    """POSTs ``body`` over h2c on stream 1 with no ``content-length`` (or
    ``declared`` as one), in DATA frames as the windows allow; stops sending
    once an answer arrives (unless ``keep_sending``); reads until the stream
    ends or is reset."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    headers = [(":method", "POST"), (":scheme", "http"), (":authority", "127.0.0.1"), (":path", path)]
    if declared is not None:
        headers.append(("content-length", str(declared)))
    connection.send_headers(1, headers)
    answer = Answer(None, b"")
    ended = False
    sent = 0
    deadline = time.monotonic() + GUARD_TIMEOUT
    with socket.create_connection(server.address, timeout=GUARD_TIMEOUT) as sock:
        while not ended and answer.reset is None:
            assert time.monotonic() < deadline, f"no answer within {GUARD_TIMEOUT}s: {answer}"
            sending = (answer.status is None or keep_sending) and sent < len(body)
            if sending:
                room = min(connection.local_flow_control_window(1), connection.max_outbound_frame_size)
                piece = min(room, len(body) - sent)
                if piece > 0:
                    connection.send_data(1, body[sent : sent + piece], end_stream=sent + piece == len(body))
                    sent += piece
            sock.sendall(connection.data_to_send())
            # While it may still send, the client only looks for an answer.
            if sending and room > 0 and not select.select([sock], [], [], 0)[0]:
                continue
            data = sock.recv(65536)
            assert data, f"the server closed the connection: {answer}"
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    answer.status = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    answer.body += event.data
                    connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    ended = True
                elif isinstance(event, h2.events.StreamReset):
                    answer.reset = event.error_code
            sock.sendall(connection.data_to_send())
    return answer


UPLOADS = {"h1": h1_upload, "h2": h2_upload}


@pytest.fixture(scope="module")
def markers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("markers")


@pytest.fixture(scope="module")
def servers(module_servers: ServerFactory, markers: Path) -> Iterator[dict[str, RushServer]]:
    """One rush per interface (started when first asked for), ``--max-body-size 1M``."""
    started: dict[str, RushServer] = {}

    class Lazy(dict[str, RushServer]):
        def __missing__(self, interface: str) -> RushServer:
            server = module_servers(
                f"{APP}:{interface}",
                "--interface",
                INTERFACES[interface],
                "--max-body-size",
                "1M",
                "--http",
                "auto",
                "--workers",
                "1",
                env=clean_environment({"RUSHTEST_MARKER_DIR": str(markers)}),
            )
            started[interface] = server
            self[interface] = server
            return server

    yield Lazy()


def upload_id() -> str:
    return os.urandom(4).hex()


def marker(markers: Path, request_id: str) -> str:
    path = markers / f"upload-{request_id}"
    return wait_for(lambda: path.exists() and path.read_text(), f"the app to record how upload {request_id} ended")


def assert_no_error_and_serving(server: RushServer, worker: int) -> None:
    """No ERROR logged, the worker is the same, a new connection is answered."""
    assert "[ERROR]" not in server.stderr_text(), server.describe()
    assert server.single_worker() == worker
    with socket.create_connection(server.address, timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        received = b""
        while data := sock.recv(65536):
            received += data
    assert received.startswith(b"HTTP/1.1 200 ") and received.endswith(b"hello"), received


@pytest.mark.parametrize("protocol", ["h1", "h2"])
@pytest.mark.parametrize("interface", ["asgi", "wsgi", "app"])
def test_a_streamed_body_past_the_limit_gets_413(
    servers: dict[str, RushServer], markers: Path, interface: str, protocol: str
) -> None:
    server = servers[interface]
    worker = server.single_worker()
    refusals = len(re.findall(REFUSAL_LOG, server.stderr_text()))
    request_id = upload_id()
    answer = UPLOADS[protocol](server, f"/upload?id={request_id}", b"x" * TOO_LARGE)
    assert (answer.status, answer.body) == (413, REFUSAL), answer
    server.wait_for_log(REFUSAL_LOG, count=refusals + 1)
    if interface == "asgi":
        # Started at the head, it read what came until the refusal: never
        # more than the limit, then the client was gone.
        seen, _, received = marker(markers, request_id).partition(" ")
        assert seen == "http.disconnect" and int(received) <= LIMIT, (seen, received)
    assert_no_error_and_serving(server, worker)


@pytest.mark.parametrize("protocol", ["h1", "h2"])
@pytest.mark.parametrize("interface", ["asgi", "wsgi", "app"])
def test_a_declared_length_past_the_limit_gets_the_same_413_before_the_app_runs(
    servers: dict[str, RushServer], markers: Path, interface: str, protocol: str
) -> None:
    server = servers[interface]
    refusals = len(re.findall(REFUSAL_LOG, server.stderr_text()))
    request_id = upload_id()
    path = f"/upload?id={request_id}"
    if protocol == "h2":
        # The head alone: the refusal must come before any byte of the body.
        answer = h2_upload(server, path, b"", declared=LIMIT + 1)
    else:
        with socket.create_connection(server.address, timeout=GUARD_TIMEOUT) as sock:
            sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {LIMIT + 1}\r\n\r\n".encode())
            received = b""
            while data := sock.recv(65536):
                received += data
        head, _, body = received.partition(b"\r\n\r\n")
        answer = Answer(int(head.split()[1]), body, closed=True)
    assert (answer.status, answer.body) == (413, REFUSAL), answer
    server.wait_for_log(REFUSAL_LOG, count=refusals + 1)
    # Refused with the head: no body message ever reached the app.
    assert not (markers / f"reading-{request_id}").exists()
    assert not (markers / f"upload-{request_id}").exists()


@pytest.mark.parametrize("protocol", ["h1", "h2"])
def test_past_the_limit_after_the_response_began_cuts_it(
    servers: dict[str, RushServer], markers: Path, protocol: str
) -> None:
    server = servers["asgi"]
    worker = server.single_worker()
    request_id = upload_id()
    answer = UPLOADS[protocol](server, f"/upload-after-start?id={request_id}", b"x" * TOO_LARGE, keep_sending=True)
    # The head and first chunk went out; the rest never comes.
    assert (answer.status, answer.body) == (200, b"reading;"), answer
    if protocol == "h2":
        assert answer.reset == h2.errors.ErrorCodes.INTERNAL_ERROR, answer
    else:
        assert answer.closed, answer
    server.wait_for_log(REFUSAL_LOG + r" \(its response had begun: the (stream was reset|connection was closed)\)")
    seen, _, received = marker(markers, request_id).partition(" ")
    assert seen == "http.disconnect" and int(received) <= LIMIT, (seen, received)
    assert_no_error_and_serving(server, worker)


@pytest.mark.parametrize("path", ["/upload", "/upload-after-start"])
def test_a_malformed_chunked_body_under_a_running_asgi_app_is_a_refusal(
    servers: dict[str, RushServer], markers: Path, path: str
) -> None:
    """As when the body is collected first: 400 and a WARNING (or, once the
    response began, a closed connection), never an ERROR."""
    server = servers["asgi"]
    worker = server.single_worker()
    request_id = upload_id()
    received = b""
    with socket.create_connection(server.address, timeout=GUARD_TIMEOUT) as sock:
        head = f"POST {path}?id={request_id} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        sock.sendall(head.encode() + b"5\r\nhello\r\n")
        wait_for(lambda: (markers / f"reading-{request_id}").exists(), "the app to read the first chunk")
        sock.sendall(b"zz\r\n")
        while data := sock.recv(65536):
            received += data
    marker_text = marker(markers, request_id)
    assert marker_text == "http.disconnect 5"
    if path == "/upload":
        assert received.startswith(b"HTTP/1.1 400 "), received
        assert b"\r\n\r\n400 Bad Request: " in received, received
        server.wait_for_log(r"\[WARNING\] refused a request from 127\.0\.0\.1:\d+: 400 ")
    else:
        # The head and first chunk, then the close: no last chunk.
        assert received.startswith(b"HTTP/1.1 200 ") and received.endswith(b"8\r\nreading;\r\n"), received
        server.wait_for_log(r"\[WARNING\] refused a request .*: 400 .*\(its response had begun")
    assert_no_error_and_serving(server, worker)


@pytest.mark.parametrize("protocol", ["h1", "h2"])
@pytest.mark.parametrize("interface", ["asgi", "wsgi", "app"])
def test_a_body_of_exactly_the_limit_is_served(
    servers: dict[str, RushServer], markers: Path, interface: str, protocol: str
) -> None:
    server = servers[interface]
    body = os.urandom(LIMIT)
    request_id = upload_id()
    answer = UPLOADS[protocol](server, f"/upload?id={request_id}", body)
    assert answer.status == 200, answer
    assert json.loads(answer.body) == {"length": LIMIT, "sha256": hashlib.sha256(body).hexdigest()}
    if interface == "asgi":
        assert marker(markers, request_id) == f"ended {LIMIT}"


@pytest.mark.parametrize(("protocol", "reference"), [("h1", "uvicorn"), ("h2", "hypercorn")])
def test_at_the_limit_rush_serves_what_the_reference_serves(
    servers: dict[str, RushServer], rush_server: ServerFactory, markers: Path, protocol: str, reference: str
) -> None:
    """uvicorn and hypercorn have no body limit: the same app given a body
    of exactly rush's limit must answer the same under each."""
    if reference == "uvicorn":
        command = [str(VENV_BIN / "uvicorn"), f"{APP}:asgi", "--fd", "{fd}", "--http", "httptools"]
    else:
        command = [str(VENV_BIN / "hypercorn"), f"{APP}:asgi", "--workers", "0", "--bind", "fd://{fd}"]
    oracle = ReferenceServer(
        app="",
        args=[],
        command=command,
        directory=rush_server.directory,
        name=reference,
        env=clean_environment({"RUSHTEST_MARKER_DIR": str(markers)}),
    )
    rush_server.servers.append(oracle)
    oracle.start()
    body = os.urandom(LIMIT)
    answers = {}
    seen = {}
    for name, server in (("rush", servers["asgi"]), (reference, oracle)):
        request_id = upload_id()
        answers[name] = UPLOADS[protocol](server, f"/upload?id={request_id}", body)
        seen[name] = marker(markers, request_id)
    assert answers["rush"] == answers[reference]
    assert answers["rush"].status == 200
    assert seen["rush"] == seen[reference] == f"ended {LIMIT}"


def test_a_body_size_of_zero_is_no_limit(rush_server: ServerFactory) -> None:
    server = rush_server(f"{APP}:app", "--interface", "rush", "--max-body-size", "0", "--http", "auto")
    body = b"z" * (20 * 1000 * 1000)
    for upload in (h1_upload, h2_upload):
        answer = upload(server, "/upload", body)
        assert answer.status == 200, answer
        assert json.loads(answer.body)["length"] == len(body), answer
