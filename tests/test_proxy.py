"""`rush proxy` over real sockets: forwarding absolute-form requests, CONNECT
tunnels, and the process model (graceful stop, several workers).

Origins and helpers are in proxy_support.py, fixtures in proxy_fixtures.py. Every origin is on loopback,
so the proxies here run with ``--allow-private`` (and
``--allow-connect-port`` for CONNECT); the default refusals, failing
origins and limits are in test_proxy_refusals.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import resource
import signal
import socket
import ssl
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from proxy_support import VIA, count_then_reply, curl, echo_until_eof, one_answer, read_all, tunnel
from support import GUARD_TIMEOUT, RushServer

# The fixtures (origin, origins, tls_origin, proxy...) come from proxy_fixtures.py.
pytest_plugins = ("proxy_fixtures",)

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


def test_a_pooled_origin_connection_that_went_bad_is_not_reused(
    proxy: Callable[..., RushServer], origins: Callable
) -> None:
    """A pooled origin connection is taken without a syscall unless an event
    came for it (src/proxy/pool.rs): one on which the origin sent bytes
    nobody asked for (a stale answer) or which it closed must not carry the
    next request, with or without a body. Each answer names the origin
    connection it came on."""
    stale_sent, closed = threading.Event(), threading.Event()
    send_stale = threading.Event()
    count = iter(range(1, 100))

    def serve(connection: socket.socket) -> None:
        number = next(count)
        reader = connection.makefile("rb")
        while head := reader.readline():
            length = 0
            while (line := head) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
                head = reader.readline()
            reader.read(length)
            connection.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n{number}".encode())
            if number == 1:
                # Bytes the proxy never asked for, on the connection it pooled.
                send_stale.wait(GUARD_TIMEOUT)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale")
                stale_sent.set()
                connection.recv(1)
                return
            if number == 2:
                connection.close()
                closed.set()
                return

    origin = origins(serve)
    server = proxy("--allow-private")
    target = f"http://127.0.0.1:{origin.port}/"
    with httpx.Client(proxy=server.url, timeout=GUARD_TIMEOUT) as client:
        assert client.get(target).text == "1"
        send_stale.set()
        assert stale_sent.wait(GUARD_TIMEOUT)
        # Not the stale answer: a new origin connection.
        assert client.get(target).text == "2"
        assert closed.wait(GUARD_TIMEOUT)
        # A request with a body cannot be sent again if the pooled connection
        # fails under it: it must not be sent on the closed one.
        assert client.post(target, content=b"body").text == "3"
        # And a healthy pooled connection is reused.
        assert client.get(target).text == "3"
    assert origin.accepted == 3


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
