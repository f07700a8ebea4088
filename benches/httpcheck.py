"""The correctness check made before any timing (and again after it): is the server answering right?

A benchmark of a server that answers with errors measures nothing, so every
run first sends the scenario's request over a raw socket, exactly as wrk will
(pipelined as deep as the scenario, with its headers), reads every response
with a small HTTP/1.1 response reader, and compares status, headers and body
(or the body's SHA-256, for files) with the scenario's `Expectation`. For
``Connection: close`` scenarios it also checks that the server closes the
connection after answering.

The http2 group's scenarios are checked over HTTP/2 instead (`check_h2_scenario`):
httpx speaking h2c with prior knowledge, several streams at once on one connection,
each answer checked against the same `Expectation` (the http3 group's HTTP/2 rows: the
same over TLS, ALPN ``h2``). The http3 group's HTTP/3 scenarios are checked by
``h3-load --check`` (`check_h3_scenario`), each answer judged here the same way.

The same module provides `wait_until_answering`: poll a TCP connect plus a
real request until the server is ready, or give up after a timeout.
"""

from __future__ import annotations

import hashlib
import json
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from benches import catalog
from benches.h3load import H3CheckFailed, h3_answers
from benches.scenarios import Expectation, Scenario
from benches.tls import CERTFILE, wrap

MAX_HEAD_BYTES = 64 * 1024


class CheckFailed(Exception):
    """The server answered, but not what the scenario expects (or not in time)."""


@dataclass
class HttpResponse:
    status: int
    reason: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None


def request_bytes(scenario: Scenario, host: str, port: int) -> bytes:
    """One request of ``scenario`` as raw bytes: the request line, Host, then the scenario's headers."""
    lines = [f"{scenario.method} {scenario.path} HTTP/1.1", f"Host: {host}:{port}"]
    lines += [f"{name}: {value}" for name, value in scenario.headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class ResponseReader:
    """Reads HTTP/1.1 responses one after the other from a connected socket (Content-Length,
    chunked, or close-delimited bodies), keeping any bytes of the next response buffered."""

    def __init__(self, sock: socket.socket, method: str = "GET") -> None:
        self.sock = sock
        self.method = method
        self.buffer = b""
        self.closed = False

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            self.closed = True
            return False
        self.buffer += chunk
        return True

    def _read_until(self, marker: bytes, limit: int) -> bytes:
        while marker not in self.buffer:
            if len(self.buffer) > limit:
                raise CheckFailed(f"no {marker!r} within {limit} bytes")
            if not self._fill():
                raise CheckFailed("connection closed in the middle of a response")
        data, _, self.buffer = self.buffer.partition(marker)
        return data

    def _read_exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._fill():
                raise CheckFailed(f"connection closed with {size - len(self.buffer)} body bytes missing")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def read_response(self) -> HttpResponse:
        head = self._read_until(b"\r\n\r\n", MAX_HEAD_BYTES).decode("latin-1")
        status_line, *header_lines = head.split("\r\n")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise CheckFailed(f"bad status line {status_line!r}")
        headers = []
        for line in header_lines:
            name, colon, value = line.partition(":")
            if not colon:
                raise CheckFailed(f"bad header line {line!r}")
            headers.append((name.strip(), value.strip()))
        response = HttpResponse(status=int(parts[1]), reason=parts[2] if len(parts) > 2 else "", headers=headers)
        response.body = self._read_body(response)
        return response

    def _read_body(self, response: HttpResponse) -> bytes:
        if self.method == "HEAD" or response.status in (204, 304) or 100 <= response.status < 200:
            return b""
        transfer_encoding = (response.header("transfer-encoding") or "").lower()
        if "chunked" in transfer_encoding:
            body = b""
            while True:
                size_line = self._read_until(b"\r\n", MAX_HEAD_BYTES).split(b";")[0].strip()
                size = int(size_line, 16)
                if size == 0:
                    # Trailers (if any) end with an empty line.
                    while self._read_until(b"\r\n", MAX_HEAD_BYTES):
                        pass
                    return body
                body += self._read_exactly(size)
                self._read_exactly(2)
        length = response.header("content-length")
        if length is not None:
            return self._read_exactly(int(length))
        # Neither: the body runs until the server closes the connection.
        while self._fill():
            pass
        body, self.buffer = self.buffer, b""
        return body

    def at_eof(self, timeout: float) -> bool:
        """Whether the server closes the connection within ``timeout`` seconds (nothing more is sent)."""
        if self.buffer:
            return False
        self.sock.settimeout(timeout)
        try:
            return not self._fill()
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


def media_type_matches(expected: str, actual: str) -> bool:
    """``text/plain`` matches ``text/plain`` and ``text/plain; charset=utf-8`` (case-insensitive)."""
    expected, actual = expected.strip().lower(), actual.strip().lower()
    return actual == expected or actual.split(";")[0].strip() == expected


def response_problems(response: HttpResponse, expect: Expectation, path: str = "/", host: str = "") -> list[str]:
    """Everything about ``response`` that differs from ``expect`` (empty when it is right); ``path``
    and ``host`` (as sent in Host) are what a ``json_shape`` check may depend on."""
    problems = []
    if response.status != expect.status:
        problems.append(f"status {response.status}, expected {expect.status}")
    for name, value in expect.headers:
        actual = response.header(name)
        if actual is None:
            problems.append(f"no {name} header")
        elif not media_type_matches(value, actual):
            problems.append(f"{name}: {actual!r}, expected {value!r}")
    if expect.body is not None and response.body != expect.body:
        problems.append(f"body {response.body[:80]!r}, expected {expect.body[:80]!r}")
    if expect.body_sha256 is not None and hashlib.sha256(response.body).hexdigest() != expect.body_sha256:
        problems.append(f"body of {len(response.body)} bytes starting {response.body[:40]!r} is not the expected one")
    if expect.json is not None:
        try:
            parsed = json.loads(response.body)
        except ValueError:
            problems.append(f"body is not JSON: {response.body[:80]!r}")
        else:
            if parsed != expect.json:
                problems.append(f"JSON {parsed!r}, expected {expect.json!r}")
    if expect.json_shape is not None and response.status == expect.status:
        problems += SHAPE_CHECKS[expect.json_shape](path, response.body, host)
    return problems


# Checks of a JSON body that depend on the path asked: name -> (path, body, host) -> problems.
SHAPE_CHECKS: dict[str, Callable[[str, bytes, str], list[str]]] = {"catalog": catalog.shape_problems}
# Paths a scenario's load asks (Scenario.spread): name -> paths.
SPREADS: dict[str, tuple[str, ...]] = {"catalog": catalog.SPREAD}


def check_scenario(
    scenario: Scenario, host: str, port: int, timeout: float = 5.0, limit: int | None = None
) -> list[HttpResponse]:
    """Sends the scenario's request (``scenario.pipeline`` copies in one write) and checks every
    response; raises CheckFailed naming the first problem. Returns the responses. A scenario with
    a ``spread`` is checked on each of its paths (the first ``limit`` of them, if given), each on
    a connection of its own."""
    if scenario.spread:
        responses = []
        for path in SPREADS[scenario.spread][:limit]:
            responses += check_scenario(replace(scenario, path=path, spread=""), host, port, timeout)
        return responses
    depth = 1 if scenario.expect_close else scenario.pipeline
    with connect(host, port, timeout, scenario.tls) as sock:
        sock.sendall(request_bytes(scenario, host, port) * depth)
        reader = ResponseReader(sock, scenario.method)
        responses = []
        try:
            for index in range(depth):
                response = reader.read_response()
                problems = response_problems(response, scenario.expect, scenario.path, f"{host}:{port}")
                if problems:
                    where = f" (response {index + 1} of {depth})" if depth > 1 else ""
                    raise CheckFailed(f"{scenario.method} {scenario.path}{where}: " + "; ".join(problems))
                responses.append(response)
        except (TimeoutError, OSError) as error:
            # Say how far it got: a server that answers the first of 16 pipelined requests and then
            # goes silent does not handle pipelining, which is not the same failure as silence.
            where = f" (after {len(responses)} of {depth} responses)" if depth > 1 else ""
            reason = error or type(error).__name__
            raise CheckFailed(f"{scenario.method} {scenario.path}{where}: {reason}") from error
        if scenario.expect_close and not reader.at_eof(timeout):
            raise CheckFailed(f"{scenario.method} {scenario.path}: connection not closed after Connection: close")
    return responses


# Requests of an HTTP/2 check, sent at once on one connection (each on a stream of its own).
H2_CHECK_STREAMS = 3


def check_h2_scenario(
    scenario: Scenario, host: str, port: int, timeout: float = 10.0, tls: bool = False
) -> list[HttpResponse]:
    """The scenario's request over HTTP/2 (h2c, prior knowledge; with ``tls``, TLS offering ALPN
    ``h2`` alone, the certificate verified against benches/tls.py's) with httpx: ``H2_CHECK_STREAMS``
    of them in flight together on one connection, each answer checked like an HTTP/1.1 one (status,
    headers, body or its digest), and each must really have come over HTTP/2. Raises CheckFailed.

    httpx's asynchronous client multiplexes the streams on one event loop (its threaded use of one
    connection once ended in a PROTOCOL_ERROR from nginx under a loaded machine)."""
    import asyncio

    import httpx

    url = f"{'https' if tls else 'http'}://{host}:{port}{scenario.path}"
    headers = list(scenario.headers)
    protocol = "HTTP/2 over TLS" if tls else "h2c"
    verify = ssl.create_default_context(cafile=str(CERTFILE)) if tls else True

    async def fetch_all() -> list[httpx.Response]:
        # http1=False, http2=True: prior knowledge, the preface sent at once, as h2load does
        # (over TLS: ALPN offers h2 alone).
        async with httpx.AsyncClient(http1=False, http2=True, timeout=timeout, verify=verify) as client:
            # The first request opens the connection; the others then share it, as streams.
            first = await client.request(scenario.method, url, headers=headers)
            others = [client.request(scenario.method, url, headers=headers) for _ in range(H2_CHECK_STREAMS - 1)]
            return [first, *await asyncio.gather(*others)]

    try:
        answers = asyncio.run(fetch_all())
    except httpx.HTTPError as error:
        where = f"{scenario.method} {scenario.path} over {protocol}"
        raise CheckFailed(f"{where}: {type(error).__name__}: {error}") from error
    responses = []
    for index, answer in enumerate(answers):
        where = f"{scenario.method} {scenario.path} over {protocol} (stream {index + 1} of {len(answers)})"
        if answer.http_version != "HTTP/2":
            raise CheckFailed(f"{where}: answered over {answer.http_version}")
        response = HttpResponse(
            status=answer.status_code,
            reason=answer.reason_phrase,
            headers=list(answer.headers.multi_items()),
            body=answer.content,
        )
        problems = response_problems(response, scenario.expect, scenario.path, f"{host}:{port}")
        if problems:
            raise CheckFailed(f"{where}: " + "; ".join(problems))
        responses.append(response)
    return responses


def check_h3_scenario(scenario: Scenario, host: str, port: int) -> list[HttpResponse]:
    """The scenario's request over HTTP/3 by ``h3-load --check`` (several on one connection, the
    certificate verified, ALPN ``h3`` required), each answer checked like an HTTP/1.1 one. Raises
    CheckFailed."""
    try:
        answers = h3_answers(scenario, host, port)
    except (H3CheckFailed, ValueError) as error:
        raise CheckFailed(str(error)) from error
    responses = []
    for index, answer in enumerate(answers):
        response = HttpResponse(
            status=answer["status"], reason="", headers=[tuple(pair) for pair in answer["headers"]], body=answer["body"]
        )
        problems = response_problems(response, scenario.expect, scenario.path, f"{host}:{port}")
        if problems:
            where = f"{scenario.method} {scenario.path} over HTTP/3 (stream {index + 1} of {len(answers)})"
            raise CheckFailed(f"{where}: " + "; ".join(problems))
        responses.append(response)
    return responses


def answers_h3(host: str, port: int) -> int:
    """`answers_http` over HTTP/3 (h3-load asks ``GET /`` once); any status will do, any failure
    raises CheckFailed."""
    from benches.scenarios import PLAIN_HELLO

    probe = Scenario(name="probe", group="probe", title="probe", path="/", expect=PLAIN_HELLO)
    try:
        return h3_answers(probe, host, port, requests=1)[0]["status"]
    except (H3CheckFailed, ValueError) as error:
        raise CheckFailed(f"no HTTP/3 answer: {error}") from error


def answers_h2(host: str, port: int, timeout: float = 2.0) -> int:
    """`answers_http` over h2c with prior knowledge (servers of the http2 group that speak only
    HTTP/2 on their port); any status will do, any failure raises OSError or CheckFailed."""
    import httpx

    try:
        with httpx.Client(http1=False, http2=True, timeout=timeout) as client:
            return client.get(f"http://{host}:{port}/").status_code
    except httpx.HTTPError as error:
        raise CheckFailed(f"no HTTP/2 answer: {type(error).__name__}: {error}") from error


def connect(host: str, port: int, timeout: float, tls: bool = False) -> socket.socket:
    """A connection to the server under test (through TLS for the ``tls`` group)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    if not tls:
        return sock
    try:
        return wrap(sock)
    except BaseException:
        sock.close()
        raise


def answers_http(host: str, port: int, timeout: float = 2.0, tls: bool = False) -> int:
    """Connects, sends ``GET /`` and reads one whole response; returns its status (any status will
    do: this only tells that an HTTP server is up, the scenario check judges the answer)."""
    with connect(host, port, timeout, tls) as sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode("latin-1"))
        return ResponseReader(sock).read_response().status


def port_is_free(host: str, port: int) -> bool:
    """True when nothing accepts connections on ``host:port`` (so whatever answers later is ours)."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return False
    except OSError:
        return True


def free_port(host: str) -> int:
    """A port the kernel considers free right now (bind to 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def wait_until_answering(
    probe: Callable[[], object],
    timeout: float,
    is_alive: Callable[[], bool],
    interval: float = 0.05,
) -> None:
    """Calls ``probe`` (a connect plus a real request) until it succeeds. Raises CheckFailed
    when ``timeout`` seconds pass, or at once when ``is_alive`` says the server has exited."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if not is_alive():
            raise CheckFailed("server exited before answering")
        try:
            probe()
            return
        except (OSError, CheckFailed) as error:
            last_error = error
        time.sleep(interval)
    raise CheckFailed(f"server did not answer within {timeout:g} s (last error: {last_error})")
