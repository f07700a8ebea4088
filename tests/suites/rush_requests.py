"""pytest plugin: requests' own test suite with httpbin served by rush.

Loaded with ``-p rush_requests -p no:httpbin`` (tests/suites/ on PYTHONPATH) by
tests/suites/runner.py when the suite runs against rush. requests' tests take their server from
pytest-httpbin's plugin fixtures (``httpbin``, ``httpbin_secure``; requests' conftest wraps both
into URL builders), which serve httpbin's Flask app with wsgiref in a thread. With that plugin
disabled, this one provides fixtures of the same names whose servers are real rush processes serving
``httpbin:app`` through rush's WSGI interface: one plain, one over TLS with pytest-httpbin's own
certificate and key (so ``httpbin_ca_bundle``, its CA bundle, verifies it as before). requests'
files are not changed.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_httpbin.certs
import support_loader

CERTS = Path(pytest_httpbin.certs.where()).parent


class HttpbinServer:
    """The parts of pytest-httpbin's server object that requests' tests use."""

    def __init__(self, protocol: str, process: Any) -> None:
        self.protocol = protocol
        self.process = process
        self.host = "127.0.0.1"
        self.port = process.port

    @property
    def url(self) -> str:
        return f"{self.protocol}://{self.host}:{self.port}"

    def __add__(self, other: str) -> str:
        return self.url + other


def _serve(protocol: str) -> Iterator[HttpbinServer]:
    support = support_loader.load()
    args = ["--interface", "wsgi", "--workers", "1"]
    if protocol == "https":
        args += ["--ssl-certfile", str(CERTS / "server.pem"), "--ssl-keyfile", str(CERTS / "server.key")]
    logs = Path(tempfile.mkdtemp(prefix=f"rush-requests-suite-{protocol}-"))
    process = support.RushServer(app="httpbin:app", args=args, directory=logs)
    if protocol == "https":
        # RushServer's readiness probe speaks plain HTTP; a TLS listener answers it by closing,
        # so wait for the process here and for the handshake below instead.
        process.start(wait=False)
        _wait_tls(support, process)
    else:
        process.start()
    try:
        yield HttpbinServer(protocol, process)
    finally:
        process.finish()
    # Kept when finish() raised: its message points at these logs.
    shutil.rmtree(logs, ignore_errors=True)


def _wait_tls(support: Any, process: Any) -> None:
    import ssl

    context = ssl.create_default_context(cafile=pytest_httpbin.certs.where())

    def answered() -> bool:
        process.assert_running("while starting")
        try:
            with support.Connection(process.address, timeout=2.0) as connection:
                with context.wrap_socket(connection.sock, server_hostname="127.0.0.1") as tls:
                    tls.sendall(b"GET /get HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
                    return tls.recv(12).startswith(b"HTTP/1.1")
        except OSError:
            return False

    support.wait_for(answered, f"rush answering over TLS\n{process.describe()}", timeout=support.START_TIMEOUT)


@pytest.fixture(scope="session")
def httpbin() -> Iterator[HttpbinServer]:
    yield from _serve("http")


@pytest.fixture(scope="session")
def httpbin_secure() -> Iterator[HttpbinServer]:
    yield from _serve("https")


@pytest.fixture(scope="session", params=["http", "https"])
def httpbin_both(
    request: pytest.FixtureRequest, httpbin: HttpbinServer, httpbin_secure: HttpbinServer
) -> HttpbinServer:
    return httpbin if request.param == "http" else httpbin_secure


@pytest.fixture(scope="class")
def class_based_httpbin(request: pytest.FixtureRequest, httpbin: HttpbinServer) -> None:
    request.cls.httpbin = httpbin


@pytest.fixture(scope="class")
def class_based_httpbin_secure(request: pytest.FixtureRequest, httpbin_secure: HttpbinServer) -> None:
    request.cls.httpbin_secure = httpbin_secure


@pytest.fixture
def httpbin_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", pytest_httpbin.certs.where())


def pytest_report_header(config: pytest.Config) -> str:
    return "requests' httpbin fixtures: rush (WSGI), not pytest-httpbin's wsgiref server"
