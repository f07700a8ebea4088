"""`rush proxy` over real sockets: forwarding, tunnels, refusals, failures, limits.

Origins are started by the tests on loopback: rush's own basic app for
forwarded requests, and small threaded servers made here for what an app
cannot do (a TLS origin with a certificate made by ``openssl`` at test
time, an echo for tunnels, origins that stall, reset or never answer).
Because every origin is on loopback, most proxies here run with
``--allow-private`` (and ``--allow-connect-port`` for CONNECT); the default
refusals have tests of their own.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from support import GUARD_TIMEOUT, RUSH, RushServer, ServerFactory

# What the proxy adds to every forwarded message: it names the host, so that
# the proxy recognises a request that comes back to it.
VIA = f"1.1 {socket.gethostname()} (rush)"

# ---------------------------------------------------------------------------
# Origins made here


class ThreadedOrigin:
    """A listening socket on loopback whose accepted connections ``handle`` serves, one thread each."""

    def __init__(self, handle: Callable[[socket.socket], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.handle = handle
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._run, args=(connection,), daemon=True).start()

    def _run(self, connection: socket.socket) -> None:
        with connection:
            try:
                self.handle(connection)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()


def echo_until_eof(connection: socket.socket) -> None:
    while data := connection.recv(65536):
        connection.sendall(data)


def count_then_reply(connection: socket.socket) -> None:
    """Reads until the client's FIN, then answers with the byte count and its hash."""
    digest = hashlib.sha256()
    total = 0
    while data := connection.recv(65536):
        digest.update(data)
        total += len(data)
    connection.sendall(f"{total} {digest.hexdigest()}".encode())


@pytest.fixture
def origins() -> Iterator[Callable[[Callable[[socket.socket], None]], ThreadedOrigin]]:
    made: list[ThreadedOrigin] = []

    def make(handle: Callable[[socket.socket], None]) -> ThreadedOrigin:
        made.append(ThreadedOrigin(handle))
        return made[-1]

    yield make
    for origin in made:
        origin.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and localhost, made with openssl now."""
    directory = tmp_path_factory.mktemp("tls")
    key, cert = directory / "key.pem", directory / "cert.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)]
    subprocess.run(
        command,
        check=True,
        capture_output=True,
        timeout=GUARD_TIMEOUT,
    )
    return cert, key


class HelloHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"hello over tls " + self.path.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        body = hashlib.sha256(self.rfile.read(length)).hexdigest().encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def tls_origin(certificate: tuple[Path, Path]) -> Iterator[int]:
    cert, key = certificate
    server = ThreadingHTTPServer(("127.0.0.1", 0), HelloHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def origin(module_servers: ServerFactory) -> RushServer:
    """rush's basic app: /echo, /digest, /big..."""
    return module_servers("basic")


@pytest.fixture
def proxy(rush_server: ServerFactory) -> Callable[..., RushServer]:
    def start(*args: object) -> RushServer:
        return rush_server("", *args, command=[str(RUSH), "proxy"])

    return start


# ---------------------------------------------------------------------------
# Helpers


def curl(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["curl", "-sS", "--max-time", str(GUARD_TIMEOUT), *args], capture_output=True, timeout=GUARD_TIMEOUT + 5
    )


def exchange(server: RushServer, data: bytes, method: str = "GET") -> tuple[list, bytes]:
    """Sends raw bytes and reads until the proxy closes (failing if it does
    not); returns the responses and any bytes after them."""
    with server.connect() as connection:
        connection.send(data)
        result = connection.read_until_close([method])
        return result.responses, result.leftover


def one_answer(server: RushServer, data: bytes) -> object:
    responses, _ = exchange(server, data)
    assert len(responses) == 1, responses
    return responses[0]


def tunnel(server: RushServer, port: int, extra: bytes = b"") -> socket.socket:
    """A CONNECT tunnel to 127.0.0.1:port through the proxy, its 200 read."""
    sock = socket.create_connection(server.address, timeout=GUARD_TIMEOUT)
    sock.sendall(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode() + extra)
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, f"the proxy closed the tunnel before answering: {head!r}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 200"), head
    return sock


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def basic(credentials: str) -> str:
    return "Basic " + base64.b64encode(credentials.encode()).decode()


# ---------------------------------------------------------------------------
# Forwarding absolute-form requests


def test_curl_get_through_the_proxy(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private")
    result = curl("-x", server.url, f"{origin.url}/", "-D", "-")
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(b"Hello, World!")
    assert VIA.encode() in result.stdout


def test_head_sent_to_the_origin_is_rewritten(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private")
    response = one_answer(
        server,
        f"GET http://127.0.0.1:{origin.port}/echo?x=1 HTTP/1.1\r\nHost: wrong.example\r\n"
        "Connection: close, X-Secret\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\n"
        "Proxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\n"
        "Upgrade: websocket\r\nX-Kept: yes\r\n\r\n".encode(),
    )
    assert response.status == 200
    echo = response.json()
    names = [name.lower() for name, _ in echo["headers"]]
    assert echo["raw_path"] == "/echo" and echo["query_string"] == "x=1"
    assert dict((name.lower(), value) for name, value in echo["headers"])["host"] == f"127.0.0.1:{origin.port}"
    for hop in ("connection", "x-secret", "keep-alive", "proxy-authorization", "proxy-connection", "te", "upgrade"):
        assert hop not in names
    assert ("x-kept", "yes") in [(name.lower(), value) for name, value in echo["headers"]]
    assert ("via", VIA) in [(name.lower(), value) for name, value in echo["headers"]]
    assert response.header("Via") == VIA
    assert response.header("Connection") == "close"


def test_keep_alive_and_pipelined_requests_answered_in_order(
    proxy: Callable[..., RushServer], origin: RushServer
) -> None:
    server = proxy("--allow-private")
    requests = b"".join(
        f"GET http://127.0.0.1:{origin.port}/echo?n={n} HTTP/1.1\r\nHost: x\r\n\r\n".encode() for n in range(5)
    )
    with server.connect() as connection:
        connection.send(requests)
        responses = connection.read_responses(5)
        assert [response.json()["query_string"] for response in responses] == [f"n={n}" for n in range(5)]
        # Still open: one more on the same connection.
        connection.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert connection.read_response().body == b"Hello, World!"


def test_origin_connections_are_reused(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private")
    ports = set()
    for _ in range(3):
        # A new client connection each time: the origin still sees one proxy connection.
        echo = one_answer(
            server, f"GET http://127.0.0.1:{origin.port}/echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        ).json()
        ports.add(echo["client"][1])
    assert len(ports) == 1


def test_large_bodies_both_ways(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private")
    body = os.urandom(4 * 1024 * 1024)
    with httpx.Client(proxy=server.url, timeout=GUARD_TIMEOUT) as client:
        answer = client.post(f"{origin.url}/digest", content=body).json()
        assert answer == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}
        # A generator is sent chunked.
        answer = client.post(f"{origin.url}/digest", content=iter([body[:1000], body[1000:]])).json()
        assert answer["sha256"] == hashlib.sha256(body).hexdigest()
        download = client.get(f"{origin.url}/big", params={"size": str(8 * 1024 * 1024)})
        assert download.status_code == 200 and download.content == b"x" * (8 * 1024 * 1024)
        assert client.head(f"{origin.url}/big").content == b""


# ---------------------------------------------------------------------------
# CONNECT tunnels


def test_https_through_connect_with_curl_and_httpx(
    proxy: Callable[..., RushServer], tls_origin: int, certificate: tuple[Path, Path]
) -> None:
    server = proxy("--allow-private", "--allow-connect-port", str(tls_origin))
    cert, _ = certificate
    result = curl("--cacert", str(cert), "-x", server.url, f"https://127.0.0.1:{tls_origin}/a")
    assert result.returncode == 0, result.stderr
    assert result.stdout == b"hello over tls /a"
    body = os.urandom(2 * 1024 * 1024)
    with httpx.Client(
        proxy=server.url, verify=ssl.create_default_context(cafile=str(cert)), timeout=GUARD_TIMEOUT
    ) as client:
        for path in ("/b", "/c"):
            assert client.get(f"https://127.0.0.1:{tls_origin}{path}").text == f"hello over tls {path}"
        assert client.post(f"https://127.0.0.1:{tls_origin}/", content=body).text == hashlib.sha256(body).hexdigest()


def test_tunnel_passes_half_close_on(proxy: Callable[..., RushServer], origins: Callable) -> None:
    origin = origins(count_then_reply)
    server = proxy("--allow-private", "--allow-connect-port", str(origin.port))
    payload = os.urandom(3 * 1024 * 1024 + 7)
    with tunnel(server, origin.port, extra=payload[:100]) as sock:
        sock.sendall(payload[100:])
        sock.shutdown(socket.SHUT_WR)
        # The origin answers only after it saw our FIN; the answer still comes back.
        assert read_all(sock) == f"{len(payload)} {hashlib.sha256(payload).hexdigest()}".encode()


def test_tunnel_relays_large_streams_both_ways(proxy: Callable[..., RushServer], origins: Callable) -> None:
    origin = origins(echo_until_eof)
    server = proxy("--allow-private", "--allow-connect-port", str(origin.port))
    payload = os.urandom(8 * 1024 * 1024)
    with tunnel(server, origin.port) as sock:
        sender = threading.Thread(target=lambda: (sock.sendall(payload), sock.shutdown(socket.SHUT_WR)))
        sender.start()
        received = read_all(sock)
        sender.join(GUARD_TIMEOUT)
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(payload).hexdigest()


def test_a_thousand_concurrent_tunnels(proxy: Callable[..., RushServer]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4500:
        pytest.skip("needs 4500 file descriptors")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4500), hard))
    count = 1000

    async def main() -> None:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        origin = await asyncio.start_server(echo, "127.0.0.1", 0, backlog=2048)
        port = origin.sockets[0].getsockname()[1]
        server = proxy("--allow-private", "--allow-connect-port", str(port), "--no-access-log")

        async def one(index: int) -> bytes:
            reader, writer = await asyncio.open_connection(*server.address)
            writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
            return head, reader, writer

        opened = await asyncio.gather(*(one(index) for index in range(count)))
        # All open at once; now each says something and hears it back.
        for index, (_, _, writer) in enumerate(opened):
            writer.write(f"tunnel {index}\n".encode())
        answers = await asyncio.gather(*(reader.readline() for _, reader, _ in opened))
        assert answers == [f"tunnel {index}\n".encode() for index in range(count)]
        # Each client half-closes; the origin's FIN comes back through every tunnel.
        for _, _, writer in opened:
            writer.write_eof()
        assert await asyncio.gather(*(reader.read() for _, reader, _ in opened)) == [b""] * count
        for _, _, writer in opened:
            writer.close()
        origin.close()
        await origin.wait_closed()

    asyncio.run(asyncio.wait_for(main(), 120))


# ---------------------------------------------------------------------------
# Secure defaults and refusals


def test_defaults_refuse_private_targets_and_other_connect_ports(
    proxy: Callable[..., RushServer], origin: RushServer
) -> None:
    server = proxy()
    for target in (f"http://127.0.0.1:{origin.port}/", f"http://localhost:{origin.port}/", "http://[::1]/"):
        response = one_answer(server, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert response.status == 403, target
        assert b"internal address" in response.body
    # 443 is allowed as a port, but the target is loopback.
    assert one_answer(server, b"CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: x\r\n\r\n").status == 403
    # Any other port is refused before the address matters.
    response = one_answer(server, b"CONNECT 10.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert response.status == 403 and b"port" in response.body


def test_forwarding_loops_are_refused(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private")
    # A request that already came through this proxy (another proxy sent it back): refused.
    response = one_answer(
        server, f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\nVia: 1.0 other, {VIA}\r\n\r\n".encode()
    )
    assert response.status == 403 and b"forwarding loop" in response.body
    # A target that is the proxy itself gets the forwarded origin-form request, which it
    # refuses (400) instead of forwarding it again: no loop either way.
    request = f"GET http://127.0.0.1:{server.port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    response = one_answer(server, request.encode())
    assert response.status == 400 and response.header("Via") == VIA


def test_client_acl(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private", "--allow-client", "10.0.0.0/8")
    response = one_answer(server, f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert response.status == 403
    allowed = proxy("--allow-private", "--allow-client", "10.0.0.0/8", "--allow-client", "127.0.0.0/8")
    assert curl("-x", allowed.url, f"{origin.url}/").stdout == b"Hello, World!"


def test_basic_authentication(proxy: Callable[..., RushServer], origin: RushServer, tmp_path: Path) -> None:
    htpasswd = tmp_path / "htpasswd"
    # {SHA} of "pw", as `htpasswd -s` writes it.
    htpasswd.write_text("# users\nbob:{SHA}" + base64.b64encode(hashlib.sha1(b"pw").digest()).decode() + "\n")
    server = proxy("--allow-private", "--auth", "alice:s3cret", "--auth-file", str(htpasswd))
    # Connection: close, so each answer ends the exchange at once (no keep-alive wait).
    request = f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    for header in ("", f"Proxy-Authorization: {basic('alice:wrong')}\r\n", "Proxy-Authorization: Bearer x\r\n"):
        response = one_answer(server, (request + header + "\r\n").encode())
        assert response.status == 407
        assert response.header("Proxy-Authenticate") == 'Basic realm="rush proxy"'
    for credentials in ("alice:s3cret", "bob:pw"):
        response = one_answer(server, (request + f"Proxy-Authorization: {basic(credentials)}\r\n\r\n").encode())
        assert response.status == 200 and response.body == b"Hello, World!"
    assert curl("-x", server.url, "--proxy-user", "alice:s3cret", f"{origin.url}/").stdout == b"Hello, World!"


@pytest.mark.parametrize(
    "head",
    [
        b"POST {t} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST {t} HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        b"POST {t} HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello",
        b"POST {t} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        b"POST {t} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
        b"POST {t} HTTP/1.1\nHost: x\r\nContent-Length: 1\r\n\r\nA",
        b"POST {t} HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET {t} HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
    ],
)
def test_smuggling_shapes_are_refused_before_reaching_an_origin(
    proxy: Callable[..., RushServer], origins: Callable, head: bytes
) -> None:
    origin = origins(echo_until_eof)
    server = proxy("--allow-private")
    responses, _ = exchange(server, head.replace(b"{t}", f"http://127.0.0.1:{origin.port}/".encode()))
    assert [response.status for response in responses] == [400]
    # The proxy refused at parse time: it never even connected.
    assert origin.accepted == 0


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET https://example.com/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"CONNECT example.com HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"CONNECT example.com:99999 HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET http://user@example.com/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        (b"GET http://example.com/ HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"GET http://example.com/" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n", 414),
        (b"GET http://example.com/ HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 17000 + b"\r\n\r\n", 431),
    ],
)
def test_bad_requests_get_a_4xx_and_a_closed_connection(
    proxy: Callable[..., RushServer], head: bytes, status: int
) -> None:
    server = proxy("--allow-private")
    responses, leftover = exchange(server, head)
    assert [response.status for response in responses] == [status]
    assert responses[0].header("Connection") == "close" and leftover == b""


def test_policy_hook(rush_server: ServerFactory, origin: RushServer, tmp_path: Path) -> None:
    script = tmp_path / "policy_proxy.py"
    script.write_text(
        "import sys\nimport rush.proxy\n\n"
        "def allow(client, host, port, headers):\n"
        "    assert client[0] == '127.0.0.1' and isinstance(port, int)\n"
        "    if any(name.lower() == 'x-explode' for name, _ in headers):\n"
        "        raise RuntimeError('boom')\n"
        "    return not any(name.lower() == 'x-deny' for name, _ in headers)\n\n"
        "sys.exit(rush.proxy.run(allow, fd=int(sys.argv[1]), allow_private=True))\n"
    )
    server = rush_server("", command=[sys.executable, str(script), "{fd}"], bind="fd")
    # Connection: close, so each answer ends the exchange at once (no keep-alive wait).
    request = f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    assert one_answer(server, (request + "\r\n").encode()).body == b"Hello, World!"
    assert one_answer(server, (request + "X-Deny: 1\r\n\r\n").encode()).status == 403
    # A policy that raises refuses (fails closed), and the worker lives on.
    assert one_answer(server, (request + "X-Explode: 1\r\n\r\n").encode()).status == 403
    assert one_answer(server, (request + "\r\n").encode()).status == 200
    server.wait_for_log("policy hook raised")


# ---------------------------------------------------------------------------
# Origins that fail


def test_refused_origin_is_a_502(proxy: Callable[..., RushServer]) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    port = closed.getsockname()[1]
    server = proxy("--allow-private", "--allow-connect-port", str(port))
    try:
        for head in (
            f"GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: x\r\n\r\n",
            f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n",
        ):
            response = one_answer(server, head.encode())
            assert response.status == 502
            assert response.header("Content-Type") == "text/plain; charset=utf-8"
    finally:
        closed.close()


def test_unresolvable_name_is_a_502(proxy: Callable[..., RushServer]) -> None:
    server = proxy("--allow-private")
    response = one_answer(server, b"GET http://no-such-host.invalid/ HTTP/1.1\r\nHost: x\r\n\r\n")
    assert response.status == 502


def test_origin_that_never_answers_is_a_504(proxy: Callable[..., RushServer], origins: Callable) -> None:
    release = threading.Event()
    origin = origins(lambda connection: release.wait(GUARD_TIMEOUT))
    server = proxy("--allow-private", "--upstream-timeout", "1")
    try:
        response = one_answer(server, f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert response.status == 504
    finally:
        release.set()


def test_origin_sending_garbage_is_a_502(proxy: Callable[..., RushServer], origins: Callable) -> None:
    def garbage(connection: socket.socket) -> None:
        connection.recv(65536)
        connection.sendall(b"SSH-2.0-OpenSSH_9.2\r\n\r\n")

    origin = origins(garbage)
    server = proxy("--allow-private")
    response = one_answer(server, f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert response.status == 502


def test_origin_that_resets_midway_closes_the_client(proxy: Callable[..., RushServer], origins: Callable) -> None:
    def truncated(connection: socket.socket) -> None:
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly ten b")
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")

    origin = origins(truncated)
    server = proxy("--allow-private")
    with server.connect() as connection:
        connection.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        result = connection.read_until_close()
    # The head went out already: the only honest signal left is closing early.
    assert result.responses == []
    assert result.leftover.startswith(b"HTTP/1.1 200 OK") and result.leftover.endswith(b"only ten b")


# ---------------------------------------------------------------------------
# Clients that ignore the limits


def test_stalled_head_is_stopped_with_a_408(proxy: Callable[..., RushServer]) -> None:
    server = proxy("--header-timeout", "1")
    with server.connect() as connection:
        connection.send(b"GET http://example.com/ HTTP/1.1\r\nHost:")
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [408]


def test_idle_tunnel_is_closed(proxy: Callable[..., RushServer], origins: Callable) -> None:
    origin = origins(echo_until_eof)
    server = proxy("--allow-private", "--allow-connect-port", str(origin.port), "--tunnel-idle-timeout", "1")
    with tunnel(server, origin.port) as sock:
        sock.sendall(b"ping")
        assert sock.recv(4) == b"ping"
        # Then silence: the proxy ends the tunnel.
        assert read_all(sock) == b""


def test_max_connections_pauses_accepting(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private", "--max-connections", "2")
    held = [server.connect(), server.connect()]
    for connection in held:
        connection.send(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost:")  # partial heads keep them busy
    waiting = server.connect()
    waiting.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    assert waiting.nothing_arrives(0.3)
    held[0].close()
    assert waiting.read_until_close().responses[0].body == b"Hello, World!"
    for connection in [*held[1:], waiting]:
        connection.close()


def test_access_log_line_per_request_and_tunnel(
    proxy: Callable[..., RushServer], origin: RushServer, origins: Callable
) -> None:
    echo = origins(echo_until_eof)
    server = proxy("--allow-private", "--allow-connect-port", str(echo.port))
    one_answer(server, f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    with tunnel(server, echo.port) as sock:
        sock.sendall(b"12345")
        sock.shutdown(socket.SHUT_WR)
        assert read_all(sock) == b"12345"
    # One line per request and per tunnel: client, request, status, bytes up, bytes down, duration.
    (tunnel_line,) = server.wait_for_log(r'127\.0\.0\.1 "CONNECT [^"]+" (\d+) (\d+) (\d+) \d+ms', stream="stdout")
    assert tunnel_line.groups() == ("200", "5", "5")
    (get_line,) = server.wait_for_log(r'127\.0\.0\.1 "GET http://[^"]+" (\d+) (\d+) (\d+) \d+ms', stream="stdout")
    assert get_line.group(1) == "200" and int(get_line.group(3)) > len("Hello, World!")


def test_chunked_response_reaches_an_http10_client_decoded(proxy: Callable[..., RushServer], origins: Callable) -> None:
    def chunked_origin(connection: socket.socket) -> None:
        connection.recv(65536)
        connection.sendall(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
            b"5\r\nhello\r\n7\r\n, world\r\n0\r\n\r\n"
        )

    origin = origins(chunked_origin)
    server = proxy("--allow-private")
    with server.connect() as connection:
        connection.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        result = connection.read_until_close()
    (response,) = result.responses
    assert response.body == b"hello, world"
    assert response.header("Transfer-Encoding") is None and response.header("Connection") == "close"
    # An HTTP/1.1 client gets the chunked framing as the origin sent it.
    with server.connect() as connection:
        connection.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        response = connection.read_response()
    assert response.body == b"hello, world" and response.header("Transfer-Encoding") == "chunked"


def test_graceful_stop_closes_idle_clients_and_lets_tunnels_finish(
    proxy: Callable[..., RushServer], origin: RushServer, origins: Callable
) -> None:
    echo = origins(echo_until_eof)
    server = proxy("--allow-private", "--allow-connect-port", str(echo.port))
    idle = server.connect()
    idle.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert idle.read_response().body == b"Hello, World!"
    with tunnel(server, echo.port) as sock:
        sock.sendall(b"before")
        assert sock.recv(6) == b"before"
        server.send_signal(signal.SIGTERM)
        # The idle keep-alive client is let go at once...
        idle.assert_closed()
        # ...while the tunnel goes on until its ends close it.
        sock.sendall(b"after")
        assert sock.recv(5) == b"after"
        sock.shutdown(socket.SHUT_WR)
        assert read_all(sock) == b""
    assert server.wait_exit() == 0


def test_several_workers(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private", "--workers", "2")
    assert len(server.wait_for_workers(2)) == 2
    with httpx.Client(proxy=server.url, timeout=GUARD_TIMEOUT) as client:
        for _ in range(3):
            # A new client connection each time, so both workers are likely asked; each must answer.
            with httpx.Client(proxy=server.url, timeout=GUARD_TIMEOUT) as fresh:
                assert fresh.get(f"{origin.url}/").text == "Hello, World!"
        assert [client.get(f"{origin.url}/").status_code for _ in range(10)] == [200] * 10


def test_origin_that_stalls_midway_is_cut_off(proxy: Callable[..., RushServer], origins: Callable) -> None:
    release = threading.Event()

    def stalls(connection: socket.socket) -> None:
        connection.recv(65536)
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nten bytes.")
        release.wait(GUARD_TIMEOUT)

    origin = origins(stalls)
    server = proxy("--allow-private", "--upstream-timeout", "1")
    try:
        with server.connect() as connection:
            connection.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            result = connection.read_until_close()
        assert result.responses == [] and result.leftover.endswith(b"ten bytes.")
    finally:
        release.set()


def test_idle_keep_alive_client_is_closed(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private", "--keep-alive-timeout", "1")
    with server.connect() as connection:
        connection.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert connection.read_response().body == b"Hello, World!"
        connection.assert_closed()


def test_client_that_never_reads_is_dropped(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    size = 64 * 1024 * 1024  # far more than the kernel's socket buffers and the proxy's own hold
    server = proxy("--allow-private", "--upstream-timeout", "1")
    with server.connect(rcvbuf=4096) as connection:
        connection.send(f"GET http://127.0.0.1:{origin.port}/big?size={size} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        # Not reading: the proxy's buffer fills and stops. Once the proxy gives
        # up, reading shows the response cut short.
        server.wait_for_log(r'"GET http://[^"]+/big\?size=\d+" 200', stream="stdout")
        received = 0
        try:
            while chunk := connection.sock.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
    assert received < size


def test_client_half_close_after_its_request_still_gets_the_answer(
    proxy: Callable[..., RushServer], origin: RushServer
) -> None:
    server = proxy("--allow-private")
    with server.connect() as connection:
        connection.send(f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        connection.sock.shutdown(socket.SHUT_WR)
        result = connection.read_until_close()
    assert [response.body for response in result.responses] == [b"Hello, World!"]


def test_ipv6_targets(proxy: Callable[..., RushServer]) -> None:
    try:
        listener = socket.create_server(("::1", 0), family=socket.AF_INET6)
    except OSError:
        pytest.skip("no IPv6 loopback here")
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                echo_until_eof(connection)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    server = proxy("--allow-private", "--allow-connect-port", str(port))
    sock = socket.create_connection(server.address, timeout=GUARD_TIMEOUT)
    with sock:
        sock.sendall(f"CONNECT [::1]:{port} HTTP/1.1\r\nHost: [::1]:{port}\r\n\r\nv6 bytes".encode())
        expected = b"HTTP/1.1 200 Connection established\r\n\r\nv6 bytes"
        received = b""
        while len(received) < len(expected):
            chunk = sock.recv(1024)
            assert chunk, received
            received += chunk
        assert received == expected
    thread.join(GUARD_TIMEOUT)
