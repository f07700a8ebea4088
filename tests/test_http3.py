"""HTTP/3 served by rush (``--http3``, issue 35) over real UDP sockets, with aioquic's HTTP/3 client
(tests/h3_client.py) verifying the server's certificate against the tests' CA.

What rush promises and these tests hold it to: ``--http3`` beside ``--ssl-certfile`` and
``--ssl-keyfile`` serves HTTP/3 (ALPN ``h3``) on the UDP port of the same number as the TCP
port it serves HTTPS on, and the TCP responses (HTTP/1.1 and HTTP/2) carry
``Alt-Svc: h3=":PORT"; ma=86400``; without ``--http3`` there is no UDP socket and no Alt-Svc;
``--http3`` without TLS is refused at start. Over HTTP/3 every interface answers (rush App, WSGI
``SERVER_PROTOCOL`` ``HTTP/3``, ASGI ``http_version`` ``"3"``, scheme ``https``), static
mounts, request bodies past QUIC's stream window, a body handed to ``receive()`` piece by piece
as it arrives, many streams at once on one connection, trailers when the request says
``te: trailers``, 413 past ``--max-body-size``, a client's stream cancel reaching the app as
``http.disconnect``, a 2 MiB streamed response and a download cancelled mid-way, the access log
saying ``HTTP/3``, SIGTERM sending GOAWAY, finishing the request in flight, refusing a later one
and closing with H3_NO_ERROR, two workers both serving, a client whose UDP port changes keeping
its connection, key updates, and a resumed session whose ticket allows no 0-RTT. Requests no correct
client sends (malformed pseudo-headers and fields, DATA before HEADERS, an empty request
stream, a second control stream, no ``h3`` in ALPN) get an error and never reach the app, and
every rush process is checked for panics and dead workers when its test ends.

The ASGI scope over HTTP/3 is compared with hypercorn's in
tests/differential/test_diff_http3.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import ssl
from pathlib import Path

import httpx
import pytest
from h3_client import H3_NO_ERROR, H3Client, H3Response, free_tcp_and_udp_port, socket_counts, sockets_on
from support import (
    GUARD_TIMEOUT,
    RushServer,
    ServerFactory,
    run_rush,
    wait_for,
    write_localhost_pki,
)

APPS = "tests.apps.h3_apps"
INTERFACES = ["app", "wsgi", "asgi"]
# RFC 9114 section 8.1: the code a server resets a request with that it did not process.
H3_REQUEST_REJECTED = 0x10B
SMALL_PAGE = b"<p>hello over QUIC</p>\n"
LARGE_FILE = os.urandom(600 * 1024)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("h3pki"))


def tls_args(pki: dict[str, Path]) -> list[str]:
    return ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])]


def start(factory: ServerFactory, app: str, *args: str, http3: bool = True) -> RushServer:
    """rush on ``--bind 127.0.0.1:PORT`` (TLS, and ``--http3`` unless told otherwise), ready once
    it listens on TCP and, with ``--http3``, has its UDP socket on the same port."""
    port = free_tcp_and_udp_port()
    flags = ["--http3"] if http3 else []
    server = factory(app, *flags, "--bind", f"127.0.0.1:{port}", *args, bind="none", port=port, wait=False)

    def ready() -> bool:
        server.assert_running("while starting")
        found = sockets_on(port)
        return found["tcp"] and (found["udp"] or not http3)

    wait_for(ready, f"rush to listen on TCP{' and UDP' if http3 else ''} port {port}\n{server.describe()}")
    return server


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("h3site")
    (directory / "index.html").write_bytes(SMALL_PAGE)
    (directory / "large.bin").write_bytes(LARGE_FILE)
    return directory


@pytest.fixture(scope="module")
def servers(module_servers: ServerFactory, pki: dict[str, Path], site: Path) -> dict[str, RushServer]:
    """One ``--http3`` server per interface; the ASGI one also mounts ``site`` at ``/s`` and
    writes the access log."""
    extra = {"asgi": ["--static", f"/s={site}", "--access-log"]}
    return {name: start(module_servers, f"{APPS}:{name}", *tls_args(pki), *extra.get(name, [])) for name in INTERFACES}


def trusting(pki: dict[str, Path]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki["ca"]))


def client(server: RushServer, pki: dict[str, Path]) -> H3Client:
    assert server.port is not None
    return H3Client(server.port, ca=pki["ca"])


def digest(body: bytes) -> dict[str, object]:
    return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


# ---------------------------------------------------------------------------
# Listening and announcing


def test_http3_without_tls_is_refused_at_start() -> None:
    port = free_tcp_and_udp_port()
    done = run_rush(f"{APPS}:asgi", "--http3", "--bind", f"127.0.0.1:{port}")
    assert done.returncode != 0, done.stdout + done.stderr
    # Refused because TLS is missing (not as an unknown option), and saying so.
    assert "unrecognized" not in done.stderr, done.stderr
    assert "--http3" in done.stderr and re.search(r"(?i)tls|ssl|certif", done.stderr), done.stderr


def test_alt_svc_and_the_udp_socket_only_with_http3(
    servers: dict[str, RushServer], rush_server: ServerFactory, pki: dict[str, Path]
) -> None:
    """HTTP/1.1 and HTTP/2 over TLS announce HTTP/3 on the same port when it is served, and
    only then; without ``--http3`` nothing is bound on UDP."""
    with_h3 = servers["asgi"]
    without = start(rush_server, f"{APPS}:asgi", *tls_args(pki), http3=False)
    for server, expected in ((with_h3, f'h3=":{with_h3.port}"; ma=86400'), (without, None)):
        for http2 in (False, True):
            with httpx.Client(verify=trusting(pki), http2=http2, timeout=GUARD_TIMEOUT) as tcp:
                answer = tcp.get(f"https://127.0.0.1:{server.port}/hello")
            assert (answer.status_code, answer.http_version) == (200, "HTTP/2" if http2 else "HTTP/1.1")
            assert answer.headers.get("alt-svc") == expected
    assert sockets_on(with_h3.port) == {"udp": True, "tcp": True}
    assert sockets_on(without.port) == {"udp": False, "tcp": True}


# ---------------------------------------------------------------------------
# Every interface


@pytest.mark.parametrize("interface", INTERFACES)
def test_each_interface_is_told_http3(servers: dict[str, RushServer], pki: dict[str, Path], interface: str) -> None:
    server = servers[interface]
    with client(server, pki) as h3:
        assert h3.alpn == "h3"
        hello = h3.get("/hello")
        assert (hello.status, hello.body) == (200, b"hello")
        answer = h3.get("/info", [("x-extra", "yes")])
    assert answer.status == 200
    found = answer.json()
    assert found["http_version"] == {"app": "3", "wsgi": "HTTP/3", "asgi": "3"}[interface]
    assert found["scheme"] == "https"
    # :authority is the request's host; no pseudo-header reaches the app as a field.
    assert found["host"] == f"127.0.0.1:{server.port}"
    assert "x-extra" in found["headers"]
    assert not [name for name in found["headers"] if name.startswith(":")]


@pytest.mark.parametrize("interface", INTERFACES)
def test_a_request_body_reaches_each_interface(
    servers: dict[str, RushServer], pki: dict[str, Path], interface: str
) -> None:
    # Past QUIC's per-stream window, so the server must open it as the body is read.
    body = os.urandom(700 * 1024 + 17)
    with client(servers[interface], pki) as h3:
        answer = h3.request("POST", "/echo", body=[body[: 300 * 1024], body[300 * 1024 :]])
    assert answer.status == 200
    assert {key: answer.json()[key] for key in ("length", "sha256")} == digest(body)


def test_a_body_is_handed_to_receive_as_it_arrives(servers: dict[str, RushServer], pki: dict[str, Path]) -> None:
    """The app answers each ``http.request`` message as it gets it: the first piece's echo comes
    back before the client has sent the second, so the body was not collected first."""
    with client(servers["asgi"], pki) as h3:
        stream = h3.open("POST", "/stream-echo", body=b"a" * 1000, end=False)

        def echoed(response: H3Response) -> int:
            return sum(int(line) for line in response.body.split() if line.isdigit())

        first = h3.wait(stream, lambda response: echoed(response) >= 1000, "the first piece echoed")
        assert echoed(first) == 1000
        h3.send(stream, b"b" * 2000, end=True)
        answer = h3.response(stream)
        assert (answer.status, echoed(answer), answer.body.endswith(b"end\n")) == (200, 3000, True)
        # A larger body, read through receive() message by message.
        body = os.urandom(1536 * 1024)
        found = h3.request("POST", "/receive", body=body).json()
    assert {key: found[key] for key in ("length", "sha256")} == digest(body)
    assert found["messages"] > 1


def test_many_streams_at_once_on_one_connection(servers: dict[str, RushServer], pki: dict[str, Path]) -> None:
    """Thirty requests open together, each answered on its own stream with its own body's digest
    (a mix-up between streams shows as a wrong digest)."""
    bodies = [f"stream {index} ".encode() * (index + 1) for index in range(30)]
    with client(servers["asgi"], pki) as h3:
        answers = h3.requests([("POST", "/echo", [], body) for body in bodies])
    assert [answer.status for answer in answers] == [200] * 30
    assert [{key: answer.json()[key] for key in ("length", "sha256")} for answer in answers] == list(
        map(digest, bodies)
    )


def test_a_large_streamed_response_and_a_download_cancelled(
    servers: dict[str, RushServer], pki: dict[str, Path]
) -> None:
    """2 MiB in 128 ``more_body`` messages, past QUIC's connection window, arrives whole and in
    order; a second download cancelled after its first bytes ends that stream alone: the
    connection serves on."""
    expected = b"".join(bytes([index % 251]) * 16384 for index in range(128))
    with client(servers["asgi"], pki) as h3:
        whole = h3.get("/download?parts=128")
        assert (whole.status, len(whole.body), whole.body == expected) == (200, len(expected), True)
        stream = h3.open("GET", "/download?parts=4096")
        h3.wait(stream, lambda response: len(response.body) >= 16384, "the first part of the download")
        h3.cancel(stream)
        assert h3.get("/hello").body == b"hello"


def test_static_files_over_http3(servers: dict[str, RushServer], pki: dict[str, Path]) -> None:
    with client(servers["asgi"], pki) as h3:
        page = h3.get("/s/index.html")
        large = h3.get("/s/large.bin")
        head = h3.request("HEAD", "/s/large.bin")
        missing = h3.get("/s/missing.txt")
    assert (page.status, page.body) == (200, SMALL_PAGE)
    assert (page.header("content-type") or "").startswith("text/html")
    assert (large.status, large.body == LARGE_FILE) == (200, True)
    assert (head.status, head.body, head.header("content-length")) == (200, b"", str(len(LARGE_FILE)))
    assert missing.status == 404


def test_trailers_when_the_request_says_te_trailers(servers: dict[str, RushServer], pki: dict[str, Path]) -> None:
    """``http.response.trailers`` arrive as a trailing HEADERS frame when the request says
    ``te: trailers``; without it they are dropped and the body still ends whole (rush's rule over
    HTTP/2 too)."""
    payload = b"payload " * 100
    with client(servers["asgi"], pki) as h3:
        with_te = h3.get("/trailers", [("te", "trailers")])
        without = h3.get("/trailers")
    assert (with_te.status, with_te.body, with_te.ended) == (200, payload, True)
    assert with_te.trailers == [("x-checksum", hashlib.sha256(payload).hexdigest())]
    assert (without.status, without.body, without.ended, without.trailers) == (200, payload, True, None)


def test_a_body_past_max_body_size_gets_413(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    server = start(rush_server, f"{APPS}:wsgi", *tls_args(pki), "--max-body-size", "1000")
    with client(server, pki) as h3:
        assert h3.request("POST", "/echo", body=b"x" * 1000).json()["length"] == 1000
        # Declared too large: refused from its head.
        assert h3.request("POST", "/echo", [("content-length", "1001")], b"x" * 1001).status == 413
        # Undeclared, in two pieces: refused once past the limit.
        assert h3.request("POST", "/echo", body=[b"x" * 600, b"x" * 600]).status == 413
        # The connection serves on.
        assert h3.get("/hello").body == b"hello"


def test_a_cancelled_stream_is_http_disconnect_for_the_app(
    servers: dict[str, RushServer], pki: dict[str, Path]
) -> None:
    """The client cancels a request mid-body (RESET_STREAM and STOP_SENDING): the app, waiting in
    ``receive()``, is told ``http.disconnect``; the connection serves on."""
    with client(servers["asgi"], pki) as h3:
        stream = h3.open("POST", "/held?id=cancelled-1", body=b"a" * 100, end=False)
        h3.wait(stream, lambda response: b"started" in response.body, "the app to start its response")
        h3.cancel(stream)
        wait_for(lambda: h3.get("/seen?id=cancelled-1").body == b"yes", "the app to be told http.disconnect")


def test_the_access_log_says_http3(servers: dict[str, RushServer], pki: dict[str, Path]) -> None:
    with client(servers["asgi"], pki) as h3:
        assert h3.get("/hello?from=h3-log").status == 200
    servers["asgi"].wait_for_log(r'"GET /hello\?from=h3-log HTTP/3" 200', stream="stdout")


def test_cache_hits_and_revalidation_over_http3(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    """The response cache answers HTTP/3 as it answers HTTP/2 (the same session code): a second GET
    is a hit (Age, the app not called), a matching If-None-Match is a 304, another variant is a
    miss, and HTTPS over TCP shares the entry."""
    server = start(rush_server, "tests.apps.cache_keyed:native", *tls_args(pki))
    french = [("accept-language", "fr")]
    with (
        client(server, pki) as h3,
        httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=trusting(pki)) as tcp,
    ):

        def calls() -> int:
            return int(tcp.get("/calls").json().get("native_lang", 0))

        first = h3.get("/lang", french)
        second = h3.get("/lang", french)
        assert (first.status, first.body, first.header("age")) == (200, b"bonjour", None)
        assert (second.status, second.body) == (200, b"bonjour") and second.header("age") is not None
        assert calls() == 1, "the second HTTP/3 request was a hit"
        etag = second.header("etag")
        assert etag
        not_modified = h3.get("/lang", [*french, ("if-none-match", etag)])
        assert (not_modified.status, not_modified.body, not_modified.header("etag")) == (304, b"", etag)
        english = h3.get("/lang", [("accept-language", "en")])
        assert (english.body, english.header("age")) == (b"hello", None)
        assert calls() == 2
        over_tcp = tcp.get("/lang", headers=dict(french))
        assert over_tcp.content == b"bonjour" and "age" in over_tcp.headers
        assert calls() == 2, "HTTPS over TCP and HTTP/3 share the entry"


def test_metrics_count_http3_requests(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    metrics_port = free_tcp_and_udp_port()
    server = start(rush_server, f"{APPS}:asgi", *tls_args(pki), "--metrics", f"127.0.0.1:{metrics_port}")

    def h3_requests() -> float:
        text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=GUARD_TIMEOUT).text
        found = re.search(r'^rush_requests_total\{protocol="h3"\} (\S+)$', text, re.MULTILINE)
        assert found, text
        return float(found.group(1))

    before = h3_requests()
    with client(server, pki) as h3:
        for _ in range(3):
            assert h3.get("/hello").status == 200
    wait_for(lambda: h3_requests() - before == 3, "three HTTP/3 requests in rush_requests_total")


def test_stop_finishes_the_request_in_flight_after_goaway(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    """SIGTERM with a request mid-body: GOAWAY comes first, naming a stream id past the one in
    flight; the request in flight gets the rest of its body and its whole answer; a request
    opened after the GOAWAY is refused unprocessed; then CONNECTION_CLOSE without error, and
    rush exits 0."""
    server = start(rush_server, f"{APPS}:asgi", *tls_args(pki), "--graceful-timeout", "10")
    with client(server, pki) as h3:
        stream = h3.open("POST", "/held?id=stop-1", body=b"a" * 1000, end=False)
        h3.wait(stream, lambda response: b"started" in response.body, "the app to start its response")
        server.worker_pids()
        server.send_signal(signal.SIGTERM)
        assert h3.wait_goaway() > stream
        late = h3.open("GET", "/hello")
        refused = h3.outcome(late)
        assert isinstance(refused, H3Response) and refused.reset_code == H3_REQUEST_REJECTED, refused
        h3.send(stream, b"b" * 1000, end=True)
        answer = h3.response(stream)
        assert (answer.status, answer.body, answer.ended) == (200, b"started\nreceived 2000", True)
        closed = h3.wait_terminated()
        assert closed.error_code == H3_NO_ERROR, closed
    assert server.wait_exit() == 0


def test_every_worker_serves_http3(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    """With two workers, new connections (each from a port of its own) reach both, and every
    request of every connection is answered: the packets of one connection keep reaching the
    worker that holds it."""
    server = start(rush_server, f"{APPS}:asgi", *tls_args(pki), "--workers", "2")
    workers = server.wait_for_workers(2)
    # Each worker binds its own socket: until both are there, the kernel's choice of socket for a
    # client's packets changes when the second appears (a connection begun on the first would
    # then reach the second, which resets it).
    assert server.port is not None
    wait_for(lambda: socket_counts(server.port)["udp"] == 2, "both workers' UDP sockets")
    seen: set[int] = set()
    connections = 0
    # Bounded: the chance that 40 connections all reach the same one of two workers is 2**-39.
    while seen != workers and connections < 40:
        connections += 1
        with client(server, pki) as h3:
            answers = h3.requests([("GET", "/pid", [], None)] * 3)
        assert [answer.status for answer in answers] == [200] * 3
        assert len({answer.body for answer in answers}) == 1, answers
        seen.add(int(answers[0].body))
    assert seen == workers
    assert server.worker_pids() == workers


def test_a_client_whose_address_changes_keeps_its_connection(
    servers: dict[str, RushServer], pki: dict[str, Path]
) -> None:
    """A NAT rebinding (the client's UDP port changes mid-connection): with one worker, the
    connection goes on from the new address (QUIC migration, after path validation)."""
    with client(servers["asgi"], pki) as h3:
        assert h3.get("/hello").body == b"hello"
        h3.rebind()
        answer = h3.outcome(h3.open("GET", "/hello?after=rebinding"))
    assert isinstance(answer, H3Response) and (answer.status, answer.body) == (200, b"hello"), answer


def test_key_updates_and_a_resumed_session_without_early_data(
    servers: dict[str, RushServer], pki: dict[str, Path]
) -> None:
    """Two key updates on one connection, a request after each; then the session ticket the
    server sent resumes the session on a new connection (no certificate exchanged) and allows
    no 0-RTT data (replayable requests stay off)."""
    server = servers["asgi"]
    with client(server, pki) as h3:
        for round_number in range(2):
            h3.key_update()
            assert h3.get(f"/hello?keys={round_number + 1}").body == b"hello"
        ticket = h3.wait_session_ticket()
    assert not ticket.max_early_data_size, ticket.max_early_data_size
    assert server.port is not None
    with H3Client(server.port, ca=pki["ca"], session_ticket=ticket) as resumed:
        assert resumed.resumed
        assert resumed.get("/hello?resumed").body == b"hello"


# ---------------------------------------------------------------------------
# What no correct client sends

# A valid request's fields; each malformed case below changes one thing in it.
VALID = [(":method", "GET"), (":scheme", "https"), (":authority", "127.0.0.1"), (":path", "/hello")]


def without(name: str) -> list[tuple[str, str]]:
    return [(key, value) for key, value in VALID if key != name]


# Requests RFC 9114 section 4.1.2 calls malformed, one defect each (x-case, added last, names it).
MALFORMED: dict[str, list[tuple[str, str]]] = {
    "no :path": without(":path"),
    "empty :path": [*without(":path"), (":path", "")],
    "no :method": without(":method"),
    "unknown pseudo-header": [*VALID, (":colour", "red")],
    "response pseudo-header": [*VALID, (":status", "200")],
    "two :method": [(":method", "POST"), *VALID],
    "pseudo-header after a field": [*without(":path"), ("x-a", "1"), (":path", "/hello")],
    "upper-case name": [*VALID, ("X-Upper", "1")],
    "space in a name": [*VALID, ("x bad", "1")],
    "newline in a value": [*VALID, ("x-bad", "a\r\nb: c")],
    "connection field": [*VALID, ("connection", "close")],
    "te other than trailers": [*VALID, ("te", "gzip")],
}


def refused(outcome: object) -> bool:
    """An answer that is a refusal: a 4xx, the stream reset, or the connection closed with an error."""
    if isinstance(outcome, H3Response):
        return outcome.reset_code is not None or (outcome.status is not None and 400 <= outcome.status < 500)
    return getattr(outcome, "error_code", 0) not in (0, H3_NO_ERROR)


def calls_of(server: RushServer, pki: dict[str, Path]) -> list[list[str | None]]:
    with client(server, pki) as h3:
        return h3.get("/log").json()


def send_fields(server: RushServer, pki: dict[str, Path], fields: list[tuple[str, str]]) -> object:
    """One request with exactly ``fields``, on a connection of its own (a server may close the
    connection for a malformed request): its outcome."""
    with client(server, pki) as h3:
        return h3.outcome(h3.send_raw_headers([(name.encode(), value.encode()) for name, value in fields]))


# Malformed requests rush --http3 passes to the app, found by this test when --http3 landed:
# h3 0.0.8 does not check them and rush's dispatch does not either. Each xfail is strict, so
# the fix shows here as an unexpected pass, to remove its mark.
REACHES_THE_APP = pytest.mark.xfail(
    strict=True, raises=AssertionError, reason="rush --http3 answers it 200 and the app is called"
)
# A connection-specific field and `te` other than trailers are refused since rush checks them
# itself (rush_h2::RequestHead::malformed, for both protocols). These three are lost inside h3's
# QPACK decoding before rush sees the head: a second :method overwrites the first, a pseudo-header
# after a field and a response pseudo-header are taken or dropped silently.
PASSED_ON = ("response pseudo-header", "two :method", "pseudo-header after a field")


def test_the_valid_request_the_malformed_ones_come_from_is_answered(
    servers: dict[str, RushServer], pki: dict[str, Path]
) -> None:
    """The control of the test below: the same fields without a defect reach the app."""
    server = servers["asgi"]
    control = send_fields(server, pki, [*VALID, ("x-case", "valid")])
    assert isinstance(control, H3Response) and (control.status, control.body) == (200, b"hello"), control
    assert ["/hello", "valid"] in calls_of(server, pki)


@pytest.mark.parametrize(
    "case", [pytest.param(case, marks=[REACHES_THE_APP] if case in PASSED_ON else []) for case in MALFORMED]
)
def test_a_malformed_request_is_refused_and_never_reaches_the_app(
    servers: dict[str, RushServer], pki: dict[str, Path], case: str
) -> None:
    server = servers["asgi"]
    marker = f"malformed {case}"
    outcome = send_fields(server, pki, [*MALFORMED[case], ("x-case", marker)])
    assert refused(outcome), outcome
    assert [call for call in calls_of(server, pki) if call[1] == marker] == []


def test_data_before_headers_is_refused_before_the_app(servers: dict[str, RushServer], pki: dict[str, Path]) -> None:
    server = servers["asgi"]
    with client(server, pki) as h3:
        stream = h3.new_stream()
        # A DATA frame (type 0x00, 5 bytes), then the HEADERS of a request that would be valid.
        h3.send_raw(stream, b"\x00\x05hello")
        h3.send_headers(stream, h3.request_fields("GET", "/hello", [("x-case", "data-first")]), end=True)
        assert refused(h3.outcome(stream))
    assert [call for call in calls_of(server, pki) if call[1] == "data-first"] == []


def test_an_empty_request_stream_is_harmless(servers: dict[str, RushServer], pki: dict[str, Path]) -> None:
    """A request stream ended with nothing on it: a stream error (RFC 9114 4.1), which a server
    may also make a connection error. Either the connection serves a real request after it, or
    it was closed with an error; a new connection is served."""
    server = servers["asgi"]
    with client(server, pki) as h3:
        empty = h3.new_stream()
        h3.send_raw(empty, b"", end=True)
        after = h3.outcome(h3.open("GET", "/hello?after=empty"))
        assert (isinstance(after, H3Response) and after.body == b"hello") or refused(after), after
    with client(server, pki) as h3:
        assert h3.get("/hello").body == b"hello"


def test_a_second_control_stream_closes_the_connection_with_an_error(
    servers: dict[str, RushServer], pki: dict[str, Path]
) -> None:
    """RFC 9114 6.2.1: a second control stream is a connection error (H3_STREAM_CREATION_ERROR):
    a request sent once the server has it is not answered, and the connection ends with an
    error code."""
    server = servers["asgi"]
    with client(server, pki) as h3:
        control = h3.new_stream(unidirectional=True)
        # Stream type 0x00 (control) and an empty SETTINGS frame: the client already has one.
        h3.send_raw(control, b"\x00\x04\x00")
        # Acknowledged: the server has the stream before the request below.
        h3.ping()
        after = h3.outcome(h3.open("GET", "/hello?after=second-control"))
    assert not isinstance(after, H3Response), after
    assert after.error_code not in (0, H3_NO_ERROR), after


def test_a_client_without_h3_in_alpn_is_refused(servers: dict[str, RushServer], pki: dict[str, Path]) -> None:
    server = servers["asgi"]
    assert server.port is not None
    with pytest.raises(ConnectionError):
        H3Client(server.port, ca=pki["ca"], alpn=["h2"])
    with client(server, pki) as h3:
        assert h3.get("/hello").body == b"hello"
