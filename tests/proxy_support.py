"""Shared pieces of the `rush proxy` tests: origins made by the tests and helpers.

Origins run on loopback: rush's own basic app (``origin``) for forwarded
requests, and small threaded servers (``origins``) for what an app cannot
do: echo for tunnels, origins that stall, reset or never answer, and a TLS
origin (``tls_origin``) with a certificate made by ``openssl`` at test time.
The fixtures themselves are in proxy_fixtures.py (a pytest plugin the
test modules name in ``pytest_plugins``); this module holds what they and
the tests import.
"""

from __future__ import annotations

import base64
import hashlib
import socket
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler

from support import GUARD_TIMEOUT, RushServer

# What the proxy adds to every forwarded message: it names the host, so that
# the proxy recognises a request that comes back to it.
VIA = f"1.1 {socket.gethostname()} (rush)"

# ---------------------------------------------------------------------------
# Origins made here


class ThreadedOrigin:
    """A listening socket on loopback whose accepted connections ``handle`` serves, one thread each."""

    def __init__(self, handle: Callable[[socket.socket], None], port: int = 0) -> None:
        self.listener = socket.create_server(("127.0.0.1", port))
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


def answer_ok(connection: socket.socket) -> None:
    """Reads a request head and answers 200 "ok", then closes."""
    head = b""
    while b"\r\n\r\n" not in head and (data := connection.recv(65536)):
        head += data
    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")


def count_then_reply(connection: socket.socket) -> None:
    """Reads until the client's FIN, then answers with the byte count and its hash."""
    digest = hashlib.sha256()
    total = 0
    while data := connection.recv(65536):
        digest.update(data)
        total += len(data)
    connection.sendall(f"{total} {digest.hexdigest()}".encode())


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
