"""Fixtures of the `rush proxy` tests, loaded as a pytest plugin (``pytest_plugins``).

* ``origin``: rush's basic app, shared by a test module (/echo, /digest, /big...);
* ``origins(handle, port=0)``: a threaded origin on loopback serving each
  connection with ``handle`` (echo, stall, reset...), closed after the test;
* ``certificate`` and ``tls_origin``: a self-signed certificate for
  127.0.0.1 made with ``openssl`` now, and an HTTPS origin using it;
* ``proxy(*flags)``: ``rush proxy`` on an inherited socket, stopped (and
  checked for panics) after the test.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from proxy_support import HelloHandler, ThreadedOrigin
from support import GUARD_TIMEOUT, RUSH, RushServer, ServerFactory


@pytest.fixture
def origins() -> Iterator[Callable[..., ThreadedOrigin]]:
    made: list[ThreadedOrigin] = []

    def make(handle: Callable[[socket.socket], None], port: int = 0) -> ThreadedOrigin:
        made.append(ThreadedOrigin(handle, port))
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
