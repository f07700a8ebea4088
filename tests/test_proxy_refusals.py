"""`rush proxy` refusing and failing well: secure defaults, access rules,
authentication, smuggling shapes and bad requests, origins that fail, and
clients that ignore the limits (each limit has a test whose client ignores it).

Origins and helpers are in proxy_support.py, fixtures in proxy_fixtures.py.
"""

from __future__ import annotations

import base64
import hashlib
import select
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import bcrypt
import pytest
from proxy_support import VIA, answer_ok, basic, curl, echo_until_eof, exchange, one_answer, read_all, tunnel
from support import GUARD_TIMEOUT, RushServer, ServerFactory

# The fixtures (origin, origins, tls_origin, proxy...) come from proxy_fixtures.py.
pytest_plugins = ("proxy_fixtures",)

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


def test_http_requests_reach_only_squids_safe_ports_unless_allowed(
    proxy: Callable[..., RushServer], origins: Callable
) -> None:
    """An http:// request to a port outside squid's Safe_ports (here 1024, the
    first port below 1025 a test can bind without privileges, or one below
    it) is refused before the proxy connects; --allow-port lets it through."""
    origin = None
    for port in (1024, 1023, 444, 1022):
        try:
            origin = origins(answer_ok, port)
            break
        except OSError:
            continue
    if origin is None:
        pytest.skip("no port outside Safe_ports could be bound here")
    request = f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    response = one_answer(proxy("--allow-private"), request)
    assert response.status == 403 and b"--allow-port PORT" in response.body, response
    assert origin.accepted == 0
    response = one_answer(proxy("--allow-private", "--allow-port", str(origin.port)), request)
    assert response.status == 200 and response.body == b"ok"


def test_every_403_names_the_flag_that_lifts_it(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-client", "10.0.0.0/8")
    target = f"http://127.0.0.1:{origin.port}/"
    response = one_answer(server, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert response.status == 403 and b"--allow-client" in response.body
    server = proxy()
    response = one_answer(server, f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert response.status == 403 and b"--allow-private" in response.body
    response = one_answer(server, b"CONNECT 10.0.0.1:22 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert response.status == 403 and b"--allow-connect-port" in response.body


def test_a_forbidden_trailer_field_never_reaches_the_origin(
    proxy: Callable[..., RushServer], origins: Callable
) -> None:
    received: list[bytes] = []

    def record(connection: socket.socket) -> None:
        while data := connection.recv(65536):
            received.append(data)

    origin = origins(record)
    server = proxy("--allow-private")
    head = f"POST http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    responses, _ = exchange(server, head.encode() + b"5\r\nhello\r\n0\r\nContent-Length: 99\r\n\r\n")
    assert [response.status for response in responses] == [400]
    assert b"Content-Length: 99" not in b"".join(received)


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


# The proxy's cap on password checks in flight per worker (src/proxy/auth.rs).
MAX_PASSWORD_CHECKS = 8


def test_a_verified_user_is_answered_while_a_flood_of_junk_credentials_is_checked(
    proxy: Callable[..., RushServer], origin: RushServer, tmp_path: Path
) -> None:
    """bcrypt runs off the loop, verified credentials are cached, and checks
    in flight are capped: junk past the cap gets 503 at once, and a user
    verified before is answered while the junk checks are still running.
    Nothing here is timed: cost-13 checks keep the pool busy for seconds,
    and the assertions are about which answers came first."""
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text("carol:" + bcrypt.hashpw(b"pass", bcrypt.gensalt(13)).decode() + "\n")
    server = proxy("--allow-private", "--workers", "1", "--auth-file", str(htpasswd))
    target = f"http://127.0.0.1:{origin.port}/"

    def request(credentials: str) -> bytes:
        authorization = f"Proxy-Authorization: {basic(credentials)}\r\n"
        return f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{authorization}\r\n".encode()

    # One check, then carol is in the cache.
    assert one_answer(server, request("carol:pass")).status == 200
    # Junk past the cap: an unknown user and a wrong password, alternately.
    junk = []
    for index in range(MAX_PASSWORD_CHECKS + 4):
        sock = socket.create_connection(server.address, timeout=GUARD_TIMEOUT)
        sock.sendall(request("eve:guess" if index % 2 else "carol:guess"))
        junk.append(sock)
    try:
        # The cap answers the extra ones at once.
        ready, _, _ = select.select(junk, [], [], GUARD_TIMEOUT)
        assert ready, "no answer to a flood past the cap"
        refused = [sock for sock in ready if read_all(sock).startswith(b"HTTP/1.1 503 ")]
        assert refused, "past the cap, a check is refused at once"
        in_flight = [sock for sock in junk if sock not in ready]
        assert in_flight
        # carol, verified before, is answered while those checks still run.
        assert one_answer(server, request("carol:pass")).status == 200
        still_running, _, _ = select.select(in_flight, [], [], 0)
        assert len(still_running) < len(in_flight), "every junk check finished before carol was answered"
        # Each junk request ends refused (407, or 503 past the cap), never let through.
        for sock in in_flight:
            assert read_all(sock).split(b" ", 2)[1] in (b"407", b"503")
    finally:
        for sock in junk:
            sock.close()


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
