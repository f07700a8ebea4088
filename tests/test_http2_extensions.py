"""The ASGI extensions HTTP/2 brings and the per-stream body timeout, over real
sockets (issue 24):

* trailers (``http.response.trailers``): a grpcio client's unary,
  server-streaming and failing calls to a raw ASGI gRPC service
  (tests/apps/grpc_app.py) over h2c and over TLS (ALPN ``h2``); without
  ``TE: trailers`` in the request the trailers are dropped (as hypercorn, the
  oracle here, drops them);
* Early Hints (``http.response.early_hint``): a 103 before the final response
  over HTTP/1.1 (a raw socket) and HTTP/2 (the ``h2`` package), none to an
  HTTP/1.0 client, and which extensions each protocol offers;
* ``--body-timeout`` per stream: a stream whose request body stalls is ended
  (408, then RST_STREAM) while another stream on the same connection is
  answered, the connection stays open, and the ASGI app reading the stalled
  body is told ``http.disconnect``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.errors
import h2.events
import httpx
import pytest
from support import GUARD_TIMEOUT, REPO, RushServer, ServerFactory, free_port, request, wait_for, write_localhost_pki

GRPC_APP = "tests.apps.grpc_app:app"
H2_ASGI = "tests.apps.h2_apps:asgi"
LINKS = [
    "</style.css>; rel=preload; as=style",
    "</app.js>; rel=preload; as=script",
    "<https://cdn.example>; rel=preconnect",
]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("grpcpki"))


@pytest.fixture(scope="module")
def grpc_servers(module_servers: ServerFactory, pki: dict[str, Path]) -> dict[str, RushServer]:
    """The gRPC app over h2c (``--http auto``) and over TLS."""
    tls = ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])]
    return {
        "h2c": module_servers(GRPC_APP, "--http", "auto"),
        "tls": module_servers(GRPC_APP, "--http", "auto", *tls),
    }


@pytest.fixture(scope="module")
def asgi_server(module_servers: ServerFactory) -> RushServer:
    return module_servers(H2_ASGI, "--http", "auto")


# Only to 127.0.0.1, never through a proxy from the environment.
CHANNEL_OPTIONS = [("grpc.enable_http_proxy", 0)]


def channel_to(over: str, server: RushServer, pki: dict[str, Path]) -> grpc.Channel:
    target = f"127.0.0.1:{server.port}"
    if over == "h2c":
        return grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
    credentials = grpc.ssl_channel_credentials(root_certificates=pki["ca"].read_bytes())
    options = [*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", "localhost")]
    return grpc.secure_channel(target, credentials, options=options)


@pytest.mark.parametrize("over", ["h2c", "tls"])
def test_grpcio_unary_streaming_and_failing_calls(
    grpc_servers: dict[str, RushServer], pki: dict[str, Path], over: str
) -> None:
    with channel_to(over, grpc_servers[over], pki) as channel:
        # Generic calls on raw bytes: no protoc, no generated stubs.
        unary = channel.unary_unary("/test.Echo/Unary", request_serializer=None, response_deserializer=None)
        assert unary(b"hello", timeout=GUARD_TIMEOUT) == b"echo:hello"
        count = channel.unary_stream("/test.Echo/Count", request_serializer=None, response_deserializer=None)
        assert list(count(b"5", timeout=GUARD_TIMEOUT)) == [f"item {index}".encode() for index in range(5)]
        # The status is read from the trailers: grpc-status 5 is NOT_FOUND.
        missing = channel.unary_unary("/test.Echo/Missing", request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as failed:
            missing(b"", timeout=GUARD_TIMEOUT)
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
        assert failed.value.details() == "no such thing"
        # Calls in a row share the connection.
        assert unary(b"again", timeout=GUARD_TIMEOUT) == b"echo:again"
    grpc_servers[over].assert_running("after the gRPC calls")


def h2_connect(port: int) -> tuple[socket.socket, h2.connection.H2Connection]:
    """A raw HTTP/2 client connection (the ``h2`` package) with its preface sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD_TIMEOUT)
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    sock.sendall(connection.data_to_send())
    return sock, connection


def events_until_ended(
    sock: socket.socket, connection: h2.connection.H2Connection, streams: set[int]
) -> Iterator[h2.events.Event]:
    """Reads events until each of ``streams`` ended or was reset (a silent
    server fails the socket's guard timeout)."""
    open_streams = set(streams)
    while open_streams:
        data = sock.recv(65536)
        assert data, "the server closed the connection"
        for event in connection.receive_data(data):
            if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                open_streams.discard(event.stream_id)
            yield event
        sock.sendall(connection.data_to_send())


def grpc_unary_over_h2(port: int, te_trailers: bool) -> list[h2.events.Event]:
    """A gRPC unary call by hand; its events (data and settings left out)."""
    sock, connection = h2_connect(port)
    with sock:
        headers = [
            (":method", "POST"),
            (":scheme", "http"),
            (":authority", f"127.0.0.1:{port}"),
            (":path", "/test.Echo/Unary"),
            ("content-type", "application/grpc"),
        ]
        if te_trailers:
            headers.append(("te", "trailers"))
        connection.send_headers(1, headers)
        connection.send_data(1, b"\x00\x00\x00\x00\x02hi", end_stream=True)
        sock.sendall(connection.data_to_send())
        return [
            event
            for event in events_until_ended(sock, connection, {1})
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived, h2.events.StreamEnded))
        ]


def summary(events: list[h2.events.Event]) -> list[tuple[str, dict[bytes, bytes]]]:
    """The events' kinds with the fields that matter here."""
    kept = {b":status", b"content-type", b"grpc-status"}
    return [
        (type(event).__name__, {name: value for name, value in getattr(event, "headers", None) or [] if name in kept})
        for event in events
    ]


def test_trailers_only_when_the_request_says_te_trailers(grpc_servers: dict[str, RushServer], tmp_path: Path) -> None:
    """With ``TE: trailers`` the status comes in trailers; without, the app's
    trailers are dropped and the stream ends with its body. hypercorn (h2c
    with prior knowledge) is the oracle of both."""
    port = grpc_servers["h2c"].port
    with_te = summary(grpc_unary_over_h2(port, te_trailers=True))
    without_te = summary(grpc_unary_over_h2(port, te_trailers=False))
    head = ("ResponseReceived", {b":status": b"200", b"content-type": b"application/grpc"})
    assert with_te == [head, ("TrailersReceived", {b"grpc-status": b"0"}), ("StreamEnded", {})]
    assert without_te == [head, ("StreamEnded", {})]

    hypercorn_port = free_port()
    hypercorn = Path(sys.executable).parent / "hypercorn"
    with open(tmp_path / "hypercorn.log", "wb") as log:
        proc = subprocess.Popen(
            [str(hypercorn), GRPC_APP, "--bind", f"127.0.0.1:{hypercorn_port}"], stdout=log, stderr=log, cwd=REPO
        )
        try:

            def answers() -> bool:
                assert proc.poll() is None, "hypercorn exited"
                try:
                    socket.create_connection(("127.0.0.1", hypercorn_port), timeout=1).close()
                except OSError:
                    return False
                return True

            wait_for(answers, "hypercorn to listen")
            theirs = [summary(grpc_unary_over_h2(hypercorn_port, te)) for te in (True, False)]
        finally:
            proc.terminate()
            proc.wait(timeout=GUARD_TIMEOUT)
    # Compared on the fields `summary` keeps, which both take from the app.
    assert theirs == [with_te, without_te]


def test_over_http11_trailers_are_dropped_and_the_connection_serves_on(grpc_servers: dict[str, RushServer]) -> None:
    """HTTP/1.1 offers no trailers (as hypercorn and uvicorn): an app that
    sends them anyway gets its body framed as usual, without them, even when
    the request says ``TE: trailers``."""
    message = b"\x00\x00\x00\x00\x02hi"
    headers = [("Content-Type", "application/grpc"), ("TE", "trailers")]
    with grpc_servers["h2c"].connect() as connection:
        connection.send(request("POST", "/test.Echo/Unary", headers, body=message))
        answer = connection.read_response("POST")
        assert (answer.status, answer.header("content-length")) == (200, "12")
        assert answer.header("transfer-encoding") is None and answer.header("grpc-status") is None
        assert answer.body == b"\x00\x00\x00\x00\x07echo:hi"
        connection.send(request("GET", "/extensions"))
        assert connection.read_response().json() == ["http.response.early_hint", "http.response.pathsend"]


def test_the_extensions_each_protocol_offers(asgi_server: RushServer) -> None:
    with httpx.Client(base_url=asgi_server.url, timeout=GUARD_TIMEOUT) as http1:
        assert http1.get("/hints").headers["x-extensions"] == "http.response.early_hint,http.response.pathsend"
    with httpx.Client(base_url=asgi_server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT) as http2:
        answer = http2.get("/hints")
        assert answer.http_version == "HTTP/2"
        assert answer.headers["x-extensions"] == (
            "http.response.early_hint,http.response.pathsend,http.response.trailers"
        )


def read_until_body(sock: socket.socket, body: bytes) -> bytes:
    data = b""
    while not data.endswith(body):
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection after {data!r}"
        data += chunk
    return data


def test_early_hints_over_http11_precede_the_response(asgi_server: RushServer) -> None:
    with socket.create_connection(("127.0.0.1", asgi_server.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(b"GET /hints HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data = read_until_body(sock, b"hinted")
    interim, _, final = data.partition(b"\r\n\r\n")
    lines = interim.decode().split("\r\n")
    assert lines[0] == "HTTP/1.1 103 Early Hints"
    assert [line.split(": ", 1)[1] for line in lines[1:]] == LINKS
    assert final.startswith(b"HTTP/1.1 200 OK\r\n")


def test_no_early_hints_for_an_http10_client(asgi_server: RushServer) -> None:
    with socket.create_connection(("127.0.0.1", asgi_server.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(b"GET /hints HTTP/1.0\r\nHost: localhost\r\n\r\n")
        data = read_until_body(sock, b"hinted")
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"103" not in data and b"rel=preload" not in data
    assert b"x-extensions: http.response.pathsend\r\n" in data.lower()


def test_early_hints_over_h2_are_an_informational_response(asgi_server: RushServer) -> None:
    sock, connection = h2_connect(asgi_server.port)
    with sock:
        headers = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/hints")]
        connection.send_headers(1, headers, end_stream=True)
        sock.sendall(connection.data_to_send())
        events = list(events_until_ended(sock, connection, {1}))
    heads = [
        event
        for event in events
        if isinstance(event, (h2.events.InformationalResponseReceived, h2.events.ResponseReceived))
    ]
    assert [dict(event.headers)[b":status"] for event in heads] == [b"103", b"200"]
    assert [value.decode() for name, value in heads[0].headers if name == b"link"] == LINKS
    body = b"".join(event.data for event in events if isinstance(event, h2.events.DataReceived))
    assert body == b"hinted"


def test_an_early_hint_goes_out_before_the_app_has_its_response(asgi_server: RushServer) -> None:
    """The hint is on the wire while the app still works on its answer (here:
    waits for a release), over HTTP/1.1 and HTTP/2: a hint held back until
    the final head would be no use."""
    with socket.create_connection(("127.0.0.1", asgi_server.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(b"GET /hints-then-wait?id=h1 HTTP/1.1\r\nHost: localhost\r\n\r\n")
        interim = read_until_body(sock, b"\r\n\r\n")
        assert interim == b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n"
        with httpx.Client(base_url=asgi_server.url, timeout=GUARD_TIMEOUT) as client:
            assert client.get("/release?id=h1").text == "ok"
        assert read_until_body(sock, b"released").startswith(b"HTTP/1.1 200 OK\r\n")

    sock, connection = h2_connect(asgi_server.port)
    with sock:
        headers = [
            (":method", "GET"),
            (":scheme", "http"),
            (":authority", "localhost"),
            (":path", "/hints-then-wait?id=h2"),
        ]
        connection.send_headers(1, headers, end_stream=True)
        sock.sendall(connection.data_to_send())
        hinted = False
        while not hinted:
            data = sock.recv(65536)
            assert data, "the server closed the connection"
            for event in connection.receive_data(data):
                assert not isinstance(event, h2.events.ResponseReceived), "the final response came first"
                hinted |= isinstance(event, h2.events.InformationalResponseReceived)
            sock.sendall(connection.data_to_send())
        with httpx.Client(base_url=asgi_server.url, timeout=GUARD_TIMEOUT) as client:
            assert client.get("/release?id=h2").text == "ok"
        events = list(events_until_ended(sock, connection, {1}))
    assert b"".join(event.data for event in events if isinstance(event, h2.events.DataReceived)) == b"released"


def test_curl_shows_the_103_over_h2c(asgi_server: RushServer) -> None:
    done = subprocess.run(
        ["curl", "-sv", "--max-time", str(GUARD_TIMEOUT), "--http2-prior-knowledge", f"{asgi_server.url}/hints"],
        capture_output=True,
        check=True,
    )
    trace = done.stderr.decode()
    assert "< HTTP/2 103" in trace and "< link: </style.css>; rel=preload; as=style" in trace
    assert trace.index("< HTTP/2 103") < trace.index("< HTTP/2 200")
    assert done.stdout == b"hinted"


@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_a_stalled_body_times_out_on_its_stream_only(rush_server: ServerFactory, interface: str) -> None:
    """Stream 1's body stalls (HEADERS, some DATA, then nothing); stream 3 is a
    plain GET. With ``--body-timeout 1`` stream 1 gets a 408 and then
    RST_STREAM(NO_ERROR) (RFC 9113 section 8.1: answered before the request
    was complete), stream 3 its answer, and the connection serves on (stream
    5). The ASGI app reading the stalled body is told ``http.disconnect``."""
    server = rush_server(f"tests.apps.h2_apps:{interface}", "--http", "auto", "--body-timeout", "1")
    upload = "/upload?id=stalled" if interface == "asgi" else "/echo"
    sock, connection = h2_connect(server.port)
    with sock:
        base = [(":scheme", "http"), (":authority", "localhost")]
        connection.send_headers(1, [(":method", "POST"), (":path", upload), *base])
        connection.send_data(1, b"partial")
        connection.send_headers(3, [(":method", "GET"), (":path", "/hello"), *base], end_stream=True)
        sock.sendall(connection.data_to_send())
        events = list(events_until_ended(sock, connection, {1, 3}))
        statuses = {
            event.stream_id: dict(event.headers)[b":status"]
            for event in events
            if isinstance(event, h2.events.ResponseReceived)
        }
        assert statuses == {1: b"408", 3: b"200"}
        # Stream 1 ended its answer; the RST_STREAM for its body follows.
        resets = [event for event in events if isinstance(event, h2.events.StreamReset)]
        if not resets:
            resets = [
                event for event in events_until_reset(sock, connection) if isinstance(event, h2.events.StreamReset)
            ]
        assert [(reset.stream_id, reset.error_code) for reset in resets] == [(1, h2.errors.ErrorCodes.NO_ERROR)]

        def get(path: str) -> bytes:
            """A GET on the next stream of the same connection."""
            stream = connection.get_next_available_stream_id()
            connection.send_headers(stream, [(":method", "GET"), (":path", path), *base], end_stream=True)
            sock.sendall(connection.data_to_send())
            later = list(events_until_ended(sock, connection, {stream}))
            return b"".join(event.data for event in later if isinstance(event, h2.events.DataReceived))

        assert get("/hello") == b"hello"
        if interface == "asgi":
            # The app's task sees the disconnect on its next turn.
            wait_for(lambda: get("/seen?id=stalled") == b"yes", "the app to see http.disconnect")
    server.assert_running("after the body timeout")


def test_a_stalled_body_under_a_started_response_is_cancelled(rush_server: ServerFactory) -> None:
    """The app answered before reading its body: once the body stalls past
    ``--body-timeout`` the response cannot become a 408, so the stream is
    reset (CANCEL) and the app told ``http.disconnect``; the connection
    serves on."""
    server = rush_server(H2_ASGI, "--http", "auto", "--body-timeout", "1")
    sock, connection = h2_connect(server.port)
    with sock:
        base = [(":scheme", "http"), (":authority", "localhost")]
        connection.send_headers(1, [(":method", "POST"), (":path", "/answer-first?id=cut"), *base])
        connection.send_data(1, b"partial")
        sock.sendall(connection.data_to_send())
        events = list(events_until_ended(sock, connection, {1}))
        assert [
            dict(event.headers)[b":status"] for event in events if isinstance(event, h2.events.ResponseReceived)
        ] == [b"200"]
        assert b"".join(event.data for event in events if isinstance(event, h2.events.DataReceived)) == b"started"
        assert [
            (event.stream_id, event.error_code) for event in events if isinstance(event, h2.events.StreamReset)
        ] == [(1, h2.errors.ErrorCodes.CANCEL)]

        def seen() -> bool:
            stream = connection.get_next_available_stream_id()
            path = "/seen?id=cut"
            connection.send_headers(stream, [(":method", "GET"), (":path", path), *base], end_stream=True)
            sock.sendall(connection.data_to_send())
            later = list(events_until_ended(sock, connection, {stream}))
            return b"".join(event.data for event in later if isinstance(event, h2.events.DataReceived)) == b"yes"

        wait_for(seen, "the app to see http.disconnect")


def events_until_reset(sock: socket.socket, connection: h2.connection.H2Connection) -> Iterator[h2.events.Event]:
    while True:
        data = sock.recv(65536)
        assert data, "the server closed the connection"
        events = connection.receive_data(data)
        sock.sendall(connection.data_to_send())
        yield from events
        if any(isinstance(event, h2.events.StreamReset) for event in events):
            return
