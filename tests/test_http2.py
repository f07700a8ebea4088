"""HTTP/2 served by rush (``--http auto`` / ``2``), over real sockets with real
clients: curl (``--http2-prior-knowledge`` over cleartext, ``--http2`` over TLS
with ALPN), httpx with ``http2=True``, the ``h2`` package's own connection for
what a client library will not do (a reset mid-request), and h2spec's strict
run over h2c and TLS.

Covers each interface (rush App, WSGI, raw ASGI) with the scope and environ the
app is told (``http_version``, ``host`` from ``:authority``, ``cookie`` joined),
50 concurrent streams on one connection, a request body past the 1 MiB stream
window into ASGI ``receive()``, a streamed response, a client reset seen as
``http.disconnect``, static files, streamed WSGI bodies (loop and pool),
suspended async handlers and the access log, ``Expect: 100-continue``,
``--max-body-size`` per stream, GOAWAY for an idle connection and on TERM
(the stream in flight finishing), the ASGI scope against hypercorn's, and
``--http 1`` staying HTTP/1.1 (no ``h2`` in ALPN, the h2c
preface refused with 505 as before)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
from rush.config import Config
from rush.values import OptionError
from support import (
    GUARD_TIMEOUT,
    REPO,
    RushServer,
    ServerFactory,
    clean_environment,
    free_port,
    wait_for,
    write_localhost_pki,
)

APPS = "tests.apps.h2_apps"
INTERFACES = ["app", "wsgi", "asgi"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("h2pki"))


def tls_args(pki: dict[str, Path]) -> list[str]:
    return ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])]


@pytest.fixture(scope="module")
def servers(module_servers: ServerFactory) -> dict[str, RushServer]:
    """One ``--http auto`` server per interface."""
    return {name: module_servers(f"{APPS}:{name}", "--http", "auto") for name in INTERFACES}


@pytest.fixture(scope="module")
def tls_server(module_servers: ServerFactory, pki: dict[str, Path]) -> RushServer:
    return module_servers(f"{APPS}:asgi", "--http", "auto", *tls_args(pki))


def curl(*args: str) -> tuple[str, str]:
    """Runs curl; returns the body and the HTTP version it reports."""
    done = subprocess.run(
        ["curl", "-sS", "--max-time", str(GUARD_TIMEOUT), "-w", "\n%{http_version}", *args],
        capture_output=True,
        check=True,
    )
    body, _, version = done.stdout.decode().rpartition("\n")
    return body, version


def start_h2_only(factory: ServerFactory, *args: str) -> RushServer:
    """A ``--http 2`` server, ready once it answers HTTP/2 (the factory's own
    readiness check speaks HTTP/1.1)."""
    server = factory(f"{APPS}:app", "--http", "2", *args, wait=False)

    def answers() -> bool:
        server.assert_running("while starting")
        scheme = "https" if args else "http"
        done = subprocess.run(
            ["curl", "-sk", "--max-time", "2", "--http2-prior-knowledge", f"{scheme}://127.0.0.1:{server.port}/hello"],
            capture_output=True,
        )
        if args:
            done = subprocess.run(
                ["curl", "-sk", "--max-time", "2", "--http2", f"https://127.0.0.1:{server.port}/hello"],
                capture_output=True,
            )
        return done.stdout == b"hello"

    wait_for(answers, "the --http 2 server to answer")
    return server


def h2_client(base_url: str, **options: object) -> httpx.Client:
    return httpx.Client(base_url=base_url, http2=True, http1=False, timeout=GUARD_TIMEOUT, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("interface", INTERFACES)
def test_curl_prior_knowledge_gets_each_interface_over_h2c(servers: dict[str, RushServer], interface: str) -> None:
    body, version = curl("--http2-prior-knowledge", f"{servers[interface].url}/hello")
    assert (body, version) == ("hello", "2")


def test_curl_negotiates_h2_over_tls_with_alpn(tls_server: RushServer, pki: dict[str, Path]) -> None:
    url = f"https://127.0.0.1:{tls_server.port}/hello"
    assert curl("--http2", "--cacert", str(pki["ca"]), url) == ("hello", "2")
    # The same port still serves HTTP/1.1 to a client that asks for it.
    assert curl("--http1.1", "--cacert", str(pki["ca"]), url) == ("hello", "1.1")


def test_auto_still_serves_http1_on_a_cleartext_port(servers: dict[str, RushServer]) -> None:
    for server in servers.values():
        answer = httpx.get(f"{server.url}/hello", timeout=GUARD_TIMEOUT)
        assert (answer.http_version, answer.text) == ("HTTP/1.1", "hello")


@pytest.mark.parametrize("interface", INTERFACES)
def test_the_app_is_told_http2_with_host_and_joined_cookies(servers: dict[str, RushServer], interface: str) -> None:
    server = servers[interface]
    with h2_client(server.url) as client:
        # Two cookie fields, as browsers send them over HTTP/2 (RFC 9113 8.2.3).
        answer = client.get("/info", headers=[("cookie", "a=1"), ("cookie", "b=2"), ("x-extra", "yes")])
    assert answer.http_version == "HTTP/2"
    found = answer.json()
    assert found["http_version"] == {"app": "2", "wsgi": "HTTP/2", "asgi": "2"}[interface]
    assert found["host"] == f"127.0.0.1:{server.port}"
    cookie = found["cookie"]
    assert cookie == (["a=1; b=2"] if interface == "asgi" else "a=1; b=2")
    # No pseudo-header reaches the app; the regular fields do.
    assert not [name for name in found["headers"] if name.startswith(":")]
    assert "x-extra" in found["headers"]


@pytest.mark.parametrize("interface", INTERFACES)
def test_a_request_body_reaches_each_interface(servers: dict[str, RushServer], interface: str) -> None:
    # Past the 1 MiB stream window and the spool threshold.
    body = os.urandom(3 * 1024 * 1024 + 17)
    with h2_client(servers[interface].url) as client:
        answer = client.post("/echo", content=body)
    assert answer.http_version == "HTTP/2"
    found = answer.json()
    assert (found["length"], found["sha256"]) == (len(body), hashlib.sha256(body).hexdigest())


def test_a_large_body_streams_into_asgi_receive(servers: dict[str, RushServer]) -> None:
    body = os.urandom(5 * 1024 * 1024)
    with h2_client(servers["asgi"].url) as client:
        found = client.post("/receive", content=body).json()
    assert (found["length"], found["sha256"]) == (len(body), hashlib.sha256(body).hexdigest())
    # Handed over as it came (more_body), not collected first.
    assert found["messages"] > 1


def test_fifty_concurrent_streams_on_one_connection(servers: dict[str, RushServer]) -> None:
    async def run() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=1)
        async with httpx.AsyncClient(
            base_url=servers["asgi"].url, http2=True, http1=False, limits=limits, timeout=GUARD_TIMEOUT
        ) as client:
            return await asyncio.gather(*(client.get(f"/stream?parts={1 + index % 7}") for index in range(50)))

    answers = asyncio.run(run())
    assert [answer.status_code for answer in answers] == [200] * 50
    for index, answer in enumerate(answers):
        assert answer.http_version == "HTTP/2"
        assert len(answer.content) == 1000 * (1 + index % 7)


def test_a_streamed_response_arrives_whole(servers: dict[str, RushServer]) -> None:
    with h2_client(servers["asgi"].url) as client:
        answer = client.get("/stream?parts=3000")
    expected = b"".join(bytes([65 + index % 26]) * 1000 for index in range(3000))
    assert answer.content == expected


def test_a_client_reset_is_http_disconnect_for_the_app(servers: dict[str, RushServer]) -> None:
    server = servers["asgi"]
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) as sock:
        connection.initiate_connection()
        headers = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", "/wait?id=r1")]
        connection.send_headers(1, headers, end_stream=True)
        # The PING's answer comes after the server handled the HEADERS before it.
        connection.ping(b"12345678")
        sock.sendall(connection.data_to_send())
        acked = False
        while not acked:
            data = sock.recv(65536)
            assert data, "the server closed the connection"
            for event in connection.receive_data(data):
                acked |= isinstance(event, h2.events.PingAckReceived)
            sock.sendall(connection.data_to_send())
        connection.reset_stream(1)
        sock.sendall(connection.data_to_send())
        with h2_client(server.url) as client:
            wait_for(lambda: client.get("/seen?id=r1").text == "yes", "the app to see http.disconnect")


def test_static_files_over_h2(rush_server: ServerFactory, tmp_path: Path) -> None:
    directory = tmp_path / "site"
    directory.mkdir()
    small = b"<p>hello</p>\n"
    large = os.urandom(600 * 1024)
    (directory / "index.html").write_bytes(small)
    (directory / "large.bin").write_bytes(large)
    for cache in ("memory", "filesystem"):
        server = rush_server("", "--http", "auto", "--static", f"/s={directory}", "--static-cache", cache)
        with h2_client(server.url) as client:
            answer = client.get("/s/index.html")
            assert (answer.http_version, answer.content) == ("HTTP/2", small)
            assert answer.headers["content-type"].startswith("text/html")
            answer = client.get("/s/large.bin")
            assert answer.content == large
            assert int(answer.headers["content-length"]) == len(large)
            head = client.head("/s/large.bin")
            assert (head.content, head.headers["content-length"]) == (b"", str(len(large)))
            assert client.get("/s/missing").status_code == 404


def test_http2_only_serves_h2_and_refuses_http1(rush_server: ServerFactory) -> None:
    server = start_h2_only(rush_server)
    assert curl("--http2-prior-knowledge", f"{server.url}/hello") == ("hello", "2")
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    # An HTTP/2 server's answer to what is not a preface: SETTINGS, then GOAWAY.
    assert not answer.startswith(b"HTTP/1.1")
    assert b"hello" not in answer


def test_http_1_stays_http1(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    server = rush_server(f"{APPS}:asgi", "--http", "1", *tls_args(pki))
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    context.set_alpn_protocols(["h2", "http/1.1"])
    with context.wrap_socket(
        socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT), server_hostname="localhost"
    ) as sock:
        assert sock.selected_alpn_protocol() == "http/1.1"
    plain = rush_server(f"{APPS}:asgi", "--http", "1")
    with socket.create_connection(("127.0.0.1", plain.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    # As before HTTP/2 existed: an HTTP/1.1 refusal (505), then the close.
    assert answer.startswith(b"HTTP/1.1 505 ")
    assert httpx.get(f"{plain.url}/hello", timeout=GUARD_TIMEOUT).http_version == "HTTP/1.1"


def test_the_default_serves_both(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    """No --http: ALPN picks h2 over TLS (http/1.1 for a client that offers only
    that), and one cleartext port serves h2c prior knowledge and HTTP/1.1."""
    server = rush_server(f"{APPS}:asgi", *tls_args(pki))
    for offered, chosen in ((["h2", "http/1.1"], "h2"), (["http/1.1"], "http/1.1")):
        context = ssl.create_default_context(cafile=str(pki["ca"]))
        context.set_alpn_protocols(offered)
        with context.wrap_socket(
            socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT), server_hostname="localhost"
        ) as sock:
            assert sock.selected_alpn_protocol() == chosen
    plain = rush_server(f"{APPS}:asgi")
    with httpx.Client(http1=False, http2=True, timeout=GUARD_TIMEOUT) as h2c:
        assert h2c.get(f"{plain.url}/hello").http_version == "HTTP/2"
    assert httpx.get(f"{plain.url}/hello", timeout=GUARD_TIMEOUT).http_version == "HTTP/1.1"


def h2spec_binary() -> str | None:
    found = shutil.which("h2spec")
    if found:
        return found
    candidate = Path.home() / "go" / "bin" / "h2spec"
    return str(candidate) if candidate.exists() else None


@pytest.mark.parametrize("over", ["h2c", "tls"])
def test_h2spec_strict_run_passes(rush_server: ServerFactory, pki: dict[str, Path], over: str) -> None:
    binary = h2spec_binary()
    if binary is None:
        pytest.fail("h2spec is missing: `make test-tools` installs it (go install)")
    extra = tls_args(pki) if over == "tls" else []
    server = start_h2_only(rush_server, *extra)
    command = [
        binary,
        # Strict: the spec's SHOULDs as well as its MUSTs (146 cases, a few more than the default).
        "--strict",
        "-h",
        "127.0.0.1",
        "-p",
        str(server.port),
        "-o",
        "5",
        "-j",
        str(server.directory / f"h2spec-{over}.xml"),
    ]
    if over == "tls":
        command += ["-t", "-k"]
    done = subprocess.run(command, capture_output=True, timeout=300)
    output = done.stdout.decode(errors="replace")
    summary = re.search(r"(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed", output)
    assert summary, output[-3000:]
    total, passed, skipped, failed = map(int, summary.groups())
    print(f"h2spec over {over}: {total} tests, {passed} passed, {skipped} skipped, {failed} failed")
    assert failed == 0 and done.returncode == 0, output[-6000:]
    assert passed == total - skipped and total >= 145
    server.assert_running("after h2spec")


def h2_connect(port: int) -> tuple[socket.socket, h2.connection.H2Connection]:
    """A raw HTTP/2 client connection (the ``h2`` package) with its preface sent."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD_TIMEOUT)
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    sock.sendall(connection.data_to_send())
    return sock, connection


def h2_events_until(
    sock: socket.socket, connection: h2.connection.H2Connection, done: Callable[[list[h2.events.Event]], bool]
) -> list[h2.events.Event]:
    """Reads and collects events until ``done(events)`` or the server closes."""
    events: list[h2.events.Event] = []
    while not done(events):
        data = sock.recv(65536)
        if not data:
            break
        events += connection.receive_data(data)
        sock.sendall(connection.data_to_send())
    return events


def raw_frames(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """The complete frames in ``data``: (type, flags, stream, payload)."""
    frames = []
    while len(data) >= 9:
        length = int.from_bytes(data[:3], "big")
        if len(data) < 9 + length:
            break
        stream = int.from_bytes(data[5:9], "big") & 0x7FFFFFFF
        frames.append((data[3], data[4], stream, data[9 : 9 + length]))
        data = data[9 + length :]
    return frames


def test_max_body_size_applies_per_stream(rush_server: ServerFactory) -> None:
    server = rush_server(f"{APPS}:wsgi", "--http", "auto", "--max-body-size", "1000")
    with h2_client(server.url) as client:
        assert client.post("/echo", content=b"x" * 1000).json()["length"] == 1000
        # Declared too large: refused from its head.
        assert client.post("/echo", content=b"x" * 1001).status_code == 413
        # Undeclared (streamed without content-length): refused once past the limit.
        assert client.post("/echo", content=iter([b"x" * 600, b"x" * 600])).status_code == 413
        # The connection serves on.
        assert client.get("/hello").text == "hello"


def test_an_idle_connection_gets_goaway_at_the_keep_alive_timeout(rush_server: ServerFactory) -> None:
    server = rush_server(f"{APPS}:app", "--http", "auto", "--keep-alive-timeout", "1")
    sock, connection = h2_connect(server.port)
    with sock:
        connection.send_headers(
            1, [(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", "/hello")], end_stream=True
        )
        sock.sendall(connection.data_to_send())
        events = h2_events_until(
            sock, connection, lambda found: any(isinstance(e, h2.events.StreamEnded) for e in found)
        )
        assert b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived)) == b"hello"
        # Then nothing from the client: the server says GOAWAY (no error) and closes.
        rest = b""
        while chunk := sock.recv(65536):
            rest += chunk
    goaway_codes = [int.from_bytes(payload[4:8], "big") for kind, _, _, payload in raw_frames(rest) if kind == 0x7]
    assert goaway_codes and set(goaway_codes) == {0}


def test_stop_sends_goaway_and_finishes_the_stream_in_flight(rush_server: ServerFactory) -> None:
    server = rush_server(f"{APPS}:asgi", "--http", "auto", "--graceful-timeout", "10")
    sock, connection = h2_connect(server.port)
    with sock:
        headers = [(":method", "POST"), (":scheme", "http"), (":authority", "x"), (":path", "/receive")]
        connection.send_headers(1, headers)
        connection.send_data(1, b"a" * 1000)
        connection.ping(b"ping0001")
        sock.sendall(connection.data_to_send())
        h2_events_until(sock, connection, lambda found: any(isinstance(e, h2.events.PingAckReceived) for e in found))
        server.worker_pids()
        server.send_signal(signal.SIGTERM)
        # From here raw frames: the h2 package ends every stream at a GOAWAY,
        # while RFC 9113 lets those at or below its last stream id finish.
        received = b""
        while not any(kind == 0x7 for kind, _, _, _ in raw_frames(received)):
            chunk = sock.recv(65536)
            assert chunk, "closed before GOAWAY"
            received += chunk
        # The request in flight finishes after the GOAWAY.
        payload = b"b" * 1000
        sock.sendall(len(payload).to_bytes(3, "big") + bytes([0x0, 0x1]) + (1).to_bytes(4, "big") + payload)
        body = b""
        ended = False
        while not ended:
            chunk = sock.recv(65536)
            assert chunk, "closed before the response ended"
            received += chunk
            body, ended = b"", False
            for kind, flags, stream, frame in raw_frames(received):
                if kind == 0x0 and stream == 1:
                    body += frame
                    ended |= bool(flags & 0x1)
        assert json.loads(body)["length"] == 2000
    assert server.wait_exit() == 0


def test_the_asgi_scope_matches_hypercorns_over_h2(servers: dict[str, RushServer], tmp_path: Path) -> None:
    """hypercorn (h2c with prior knowledge) as the oracle of an HTTP/2 scope."""
    port = free_port()
    hypercorn = Path(sys.executable).parent / "hypercorn"
    log = open(tmp_path / "hypercorn.log", "wb")
    proc = subprocess.Popen(
        [str(hypercorn), f"{APPS}:asgi", "--bind", f"127.0.0.1:{port}"], stdout=log, stderr=log, cwd=REPO
    )
    try:

        def scope_of(base: str) -> dict[str, object] | None:
            assert proc.poll() is None, "hypercorn exited"
            try:
                with h2_client(base) as client:
                    answer = client.get("/scope?a=1&b=%20", headers=[("cookie", "c=1"), ("x-test", "yes")])
            except httpx.TransportError:
                return None
            assert answer.http_version == "HTTP/2"
            return answer.json()

        theirs = wait_for(lambda: scope_of(f"http://127.0.0.1:{port}"), "hypercorn to answer")
        ours = scope_of(servers["asgi"].url)
    finally:
        proc.terminate()
        proc.wait(timeout=GUARD_TIMEOUT)
        log.close()
    assert ours is not None
    # The clients' own fields differ only by the port in the authority.
    for scope in (ours, theirs):
        scope["headers"] = [[name, value] for name, value in scope["headers"] if name != "host"]
    assert ours == theirs


@pytest.mark.parametrize("threads", ["0", "2"])
def test_a_streamed_wsgi_body_on_the_loop_and_on_the_pool(rush_server: ServerFactory, threads: str) -> None:
    # A generator body: pumped as the stream's window opens (on the loop, or
    # queued by a pool thread and completed through the stream's key).
    server = rush_server("wsgi_apps", "--http", "auto", "--threads", threads)
    size = 3 * 1024 * 1024 + 5
    block = bytes(range(256)) * 256
    expected = (block * (size // len(block) + 1))[:size]
    with h2_client(server.url) as client:
        answers = [client.get(f"/big?size={size}") for _ in range(2)]
        assert client.post("/echo", content=b"z" * 70000).json()["length"] == 70000
    for answer in answers:
        assert (answer.http_version, answer.status_code) == ("HTTP/2", 200)
        assert answer.content == expected


def test_async_handlers_and_the_access_log_over_h2(rush_server: ServerFactory) -> None:
    # Suspended handlers finish through their completion (the stream's key).
    server = rush_server("async_app", "--http", "auto", "--access-log")

    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT) as client:
            waiting = asyncio.ensure_future(client.get("/wait/h2key"))
            slept = await client.get("/sleep?ms=1&id=7")
            released = await client.get("/release/h2key")
            return [await waiting, slept, released]

    waited, slept, released = asyncio.run(run())
    assert all(answer.http_version == "HTTP/2" for answer in (waited, slept, released))
    assert waited.json() == {"key": "h2key", "waited": True}
    assert slept.json() == {"id": "7", "slept": True}
    assert released.text == "released h2key"
    server.wait_for_log(r'"GET /sleep\?ms=1&id=7 HTTP/2" 200', stream="stdout")


def test_the_http_option_is_checked_and_read_from_the_environment(rush_server: ServerFactory) -> None:
    for value in ("1", "2", "auto"):
        Config(app="x:y", http=value).validate()
    with pytest.raises(OptionError, match="http"):
        Config(app="x:y", http="3").validate()
    server = rush_server(f"{APPS}:app", env=clean_environment({"RUSH_HTTP": "auto"}))
    assert curl("--http2-prior-knowledge", f"{server.url}/hello") == ("hello", "2")


def test_expect_100_continue_is_answered_before_the_body(servers: dict[str, RushServer]) -> None:
    sock, connection = h2_connect(servers["wsgi"].port)
    with sock:
        headers = [(":method", "POST"), (":scheme", "http"), (":authority", "x"), (":path", "/echo")]
        connection.send_headers(1, [*headers, ("expect", "100-continue"), ("content-length", "5")])
        sock.sendall(connection.data_to_send())
        events = h2_events_until(
            sock, connection, lambda found: any(isinstance(e, h2.events.InformationalResponseReceived) for e in found)
        )
        (informational,) = [e for e in events if isinstance(e, h2.events.InformationalResponseReceived)]
        assert dict(informational.headers)[b":status"] == b"100"
        connection.send_data(1, b"hello", end_stream=True)
        sock.sendall(connection.data_to_send())
        events = h2_events_until(
            sock, connection, lambda found: any(isinstance(e, h2.events.StreamEnded) for e in found)
        )
        body = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
        assert json.loads(body)["length"] == 5


def test_a_wsgi_header_value_with_whitespace_around_it_reaches_an_http2_client_trimmed(
    module_servers: ServerFactory,
) -> None:
    """RFC 9113 8.2.1: a field value must not begin or end with whitespace,
    and a response that has one is malformed; the ``h2`` package, with its
    inbound validation on as it is by default, refuses it (curl with nghttp2
    1.52 took it when tried). HTTP/1.1 sends the value as the app gave
    it and its readers drop the optional whitespace around it (RFC 9110
    5.5), so over HTTP/2 rush sends what they read: the value trimmed."""
    server = module_servers("tests.apps.wsgi_apps:app", "--http", "auto")
    sock, connection = h2_connect(server.port)
    with sock:
        request = [(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", "/padded-header")]
        connection.send_headers(1, request, end_stream=True)
        sock.sendall(connection.data_to_send())
        events = h2_events_until(
            sock, connection, lambda found: any(isinstance(e, h2.events.StreamEnded) for e in found)
        )
    (response,) = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
    assert dict(response.headers)[b"x-padded"] == b"spaced value"
    assert b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived)) == b"padded"
