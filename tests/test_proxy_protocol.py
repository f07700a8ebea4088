"""``--proxy-protocol``: the PROXY header (HAProxy's v1 text and v2 binary)
before every connection, on plain, TLS and Unix-socket listeners, over real
sockets.

Headers are built by hand here (`v1`, `v2`), sent by raw sockets, followed by
HTTP/1.1, by TLS with HTTP/1.1 and HTTP/2 (httpcore, httpx's transport, with a
network backend that writes the header after connecting), or by h2c prior
knowledge. What the app saw is read back from the app itself (the rush App's
``/origin``, the WSGI app's ``/environ``, the ASGI app's ``/scope``), and the
access log is checked too. A refused connection is closed with no answer:
``assert_closed`` reads until the close and checks no byte came.

The corpus mirrors gunicorn's own PROXY request cases (tests/requests/valid
and invalid, ``pp_*``), rewritten here; where gunicorn takes a request with
no header at all when its option is on, rush refuses it (the specification
says a receiver must not guess; see docs/architecture.md).

The oracle is a real HAProxy (Debian's package, `make test-tools`), in TCP
mode with ``send-proxy`` and ``send-proxy-v2`` in front of rush: a client that
connects to HAProxy from 127.0.0.2 must be seen by the app as 127.0.0.2 with
its own source port, as HAProxy saw it, over HTTP/1.1 and over TLS passed
through with HTTP/2.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import ssl
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from tests.support import (
    GUARD_TIMEOUT,
    START_TIMEOUT,
    Connection,
    Gate,
    RushServer,
    ServerFactory,
    chunked,
    free_port,
    request,
    wait_for,
)
from tests.ws_support import read_frame, read_head, upgrade_request

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def v1(source: str = "203.0.113.7", port: int = 51000, family: str = "TCP4", destination: str | None = None) -> bytes:
    destination = destination or ("::1" if family == "TCP6" else "127.0.0.1")
    return f"PROXY {family} {source} {destination} {port} 443\r\n".encode()


def tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!BH", kind, len(value)) + value


def v2(source: str | None = "203.0.113.7", port: int = 51000, command: int = 0x1, tlvs: bytes = b"") -> bytes:
    """A v2 header: PROXY (command 1) or LOCAL (0), over TCP from ``source``
    (IPv4 or IPv6 by its form; None: UNSPEC), then ``tlvs``."""
    if source is None:
        family, addresses = 0x00, b""
    elif ":" in source:
        family = 0x21
        addresses = socket.inet_pton(socket.AF_INET6, source) + socket.inet_pton(socket.AF_INET6, "::1")
        addresses += struct.pack("!HH", port, 443)
    else:
        family = 0x11
        addresses = socket.inet_aton(source) + socket.inet_aton("127.0.0.1") + struct.pack("!HH", port, 443)
    payload = addresses + tlvs
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack("!H", len(payload)) + payload


def v2_unix(path: bytes = b"/run/client.sock") -> bytes:
    addresses = path.ljust(108, b"\0") + b"/run/haproxy.sock".ljust(108, b"\0")
    return V2_SIGNATURE + bytes([0x21, 0x31]) + struct.pack("!H", len(addresses)) + addresses


# interface -> (app, target, how to read the client (host, port) from the JSON answer)
INTERFACES: dict[str, tuple[str, str, Any]] = {
    "rush": ("fronted", "/origin", lambda j: tuple(j["client"]) if j["client"] else None),
    "wsgi": (
        "wsgi_apps",
        "/environ",
        lambda j: (j["REMOTE_ADDR"], int(j["REMOTE_PORT"])) if j.get("REMOTE_ADDR") else None,
    ),
    "asgi": ("asgi_apps", "/scope", lambda j: tuple(j["client"]) if j["client"] else None),
}


def wait_ready(server: RushServer, prefix: bytes = b"PROXY UNKNOWN\r\n") -> RushServer:
    """Like `RushServer.wait_ready`, with the PROXY header every connection
    now needs before the probe (a TLS listener answers the probe with its
    plain-HTTP hint, which is an answer too)."""
    probe = prefix + request("GET", "/__readiness_probe__", [("Connection", "close")])

    def answered() -> bool:
        server.assert_running("while starting")
        try:
            with Connection(server.address, server.family, timeout=2.0) as connection:
                connection.send(probe)
                return bool(connection.read_until_close().responses)
        except (OSError, AssertionError):
            return False

    wait_for(answered, f"rush answering behind a PROXY header\n{server.describe()}", timeout=START_TIMEOUT)
    return server


def start(rush_server: ServerFactory, app: str, *args: str, **options: Any) -> RushServer:
    return wait_ready(rush_server(app, "--proxy-protocol", *args, wait=False, **options))


def ask(server: RushServer, interface: str, header: bytes, extra: list[tuple[str, str]] | None = None) -> Any:
    """Sends ``header`` and one request; returns the app's JSON answer."""
    target = INTERFACES[interface][1]
    with server.connect() as connection:
        connection.send(header + request("GET", target, extra))
        response = connection.read_response()
        assert response.status == 200, response
        return response.json()


def client_seen(server: RushServer, interface: str, header: bytes) -> Any:
    return INTERFACES[interface][2](ask(server, interface, header))


def assert_refused(server: RushServer, data: bytes, shut: bool = False) -> None:
    """``data`` (and, with ``shut``, the end of what the client sends) gets
    the connection closed with not one byte of answer."""
    with server.connect() as connection:
        connection.send(data)
        if shut:
            connection.sock.shutdown(socket.SHUT_WR)
        connection.assert_closed()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A throwaway CA, a certificate for localhost and 127.0.0.1, and a
    client certificate whose CN is "client one" (``client.pem``, key and chain)."""
    import trustme  # only the TLS tests need it

    directory = tmp_path_factory.mktemp("pp-pki")
    ca = trustme.CA()
    leaf = ca.issue_cert("localhost", "127.0.0.1")
    paths = {name: directory / f"{name}.pem" for name in ("ca", "chain", "key", "client")}
    ca.cert_pem.write_to_path(paths["ca"])
    leaf.private_key_pem.write_to_path(paths["key"])
    paths["chain"].write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    client = ca.issue_cert("client.example", common_name="client one")
    client.private_key_and_cert_chain_pem.write_to_path(paths["client"])
    return paths


def tls_args(pki: dict[str, Path]) -> list[str]:
    return ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])]


# -- the client the header names, everywhere the client goes ------------------------------------


@pytest.mark.parametrize("interface", INTERFACES)
def test_each_interface_sees_the_headers_client(rush_server: ServerFactory, interface: str) -> None:
    server = start(rush_server, INTERFACES[interface][0], "--access-log")
    assert client_seen(server, interface, v1("192.0.2.10", 56324)) == ("192.0.2.10", 56324)
    assert client_seen(server, interface, v1("2001:db8::1", 4711, "TCP6")) == ("2001:db8::1", 4711)
    assert client_seen(server, interface, v2("198.51.100.20", 40000)) == ("198.51.100.20", 40000)
    assert client_seen(server, interface, v2("2001:db8::5", 8080)) == ("2001:db8::5", 8080)
    # The access log names the header's client, not the balancer.
    server.wait_for_log(r"192\.0\.2\.10:56324 - \"GET ", stream="stdout")
    server.wait_for_log(r"198\.51\.100\.20:40000 - \"GET ", stream="stdout")


@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
def test_local_unknown_and_unspec_keep_the_connections_peer(rush_server: ServerFactory, interface: str) -> None:
    server = start(rush_server, INTERFACES[interface][0])
    target = INTERFACES[interface][1]
    for header in [v2(command=0x0), v2(None, command=0x0), v2(None), b"PROXY UNKNOWN\r\n"]:
        with server.connect() as connection:
            own_port = connection.sock.getsockname()[1]
            connection.send(header + request("GET", target))
            seen = INTERFACES[interface][2](connection.read_response().json())
        assert seen == ("127.0.0.1", own_port), header


def test_proxy_headers_on_top_are_believed_only_from_a_trusted_client(rush_server: ServerFactory) -> None:
    server = start(rush_server, "asgi_apps", "--forwarded-allow-ips", "127.0.0.1,10.1.1.1")
    xff = [("X-Forwarded-For", "192.0.2.99")]
    # The header names an untrusted client: its own X-Forwarded-For is a
    # claim, not a proxy's report, and is ignored.
    assert tuple(ask(server, "asgi", v1("203.0.113.7"), xff)["client"]) == ("203.0.113.7", 51000)
    # The header names a trusted proxy (an L7 proxy behind the balancer):
    # what it forwards is believed.
    assert ask(server, "asgi", v1("10.1.1.1"), xff)["client"][0] == "192.0.2.99"


def test_many_requests_on_one_connection_after_the_header(rush_server: ServerFactory) -> None:
    server = start(rush_server, "fronted")
    with server.connect() as connection:
        connection.send(v2("192.0.2.44", 1234))
        for _ in range(3):
            connection.send(request("GET", "/origin"))
            assert connection.read_response().json()["client"] == ["192.0.2.44", 1234]


def test_the_v2_tls_and_authority_tlvs_reach_the_app(rush_server: ServerFactory) -> None:
    ssl_value = b"\x07" + struct.pack("!I", 0) + tlv(0x21, b"TLSv1.3") + tlv(0x22, b"client one")
    tlvs = tlv(0x02, b"shop.example") + tlv(0x20, ssl_value) + tlv(0x04, b"\0" * 5)
    expected = {
        "authority": "shop.example",
        "ssl": {
            "client": 7,
            "verify": 0,
            "version": "TLSv1.3",
            "cn": "client one",
            "cipher": None,
            "sig_alg": None,
            "key_alg": None,
        },
    }
    asgi = start(rush_server, "asgi_apps")
    assert ask(asgi, "asgi", v2(tlvs=tlvs))["extensions"]["proxy_protocol"] == expected
    assert "proxy_protocol" not in ask(asgi, "asgi", v1())["extensions"]
    wsgi = start(rush_server, "wsgi_apps")
    assert ask(wsgi, "wsgi", v2(tlvs=tlvs))["rush.proxy_protocol"] == expected
    assert "rush.proxy_protocol" not in ask(wsgi, "wsgi", v2())


def test_a_unix_socket_listener(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = start(rush_server, "asgi_apps", bind="uds")
    # A Unix-socket peer is trusted, as for proxy headers.
    assert client_seen(server, "asgi", v1("192.0.2.10", 56324)) == ("192.0.2.10", 56324)
    # A client on the balancer's own Unix socket: shown as rush shows one.
    assert client_seen(server, "asgi", v2_unix()) is None
    assert_refused(server, request("GET", "/scope"))


def test_websocket_after_the_header(rush_server: ServerFactory) -> None:
    server = start(rush_server, "tests.apps.ws_apps:asgi_app")
    with server.connect() as connection:
        connection.send(v2("192.0.2.50", 5050, tlvs=tlv(0x02, b"chat.example")) + upgrade_request("/scope"))
        assert read_head(connection).startswith(b"HTTP/1.1 101 ")
        opcode, payload = read_frame(connection)
        scope = json.loads(payload)
        assert opcode == 0x1 and scope["client"] == ["192.0.2.50", 5050]
        assert scope["extensions"]["proxy_protocol"] == {"authority": "chat.example", "ssl": None}


# -- refusals ---------------------------------------------------------------------------------------


def metrics(port: int) -> str:
    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=GUARD_TIMEOUT).text


def test_an_untrusted_peer_is_refused_and_the_app_never_runs(rush_server: ServerFactory, tmp_path: Path) -> None:
    port = free_port()
    server = rush_server(
        "basic", "--proxy-protocol", "--forwarded-allow-ips", "10.0.0.1", "--metrics", f"127.0.0.1:{port}", wait=False
    )
    wait_for(lambda: server.stderr_text().count("serving on") >= 1, f"rush starting\n{server.describe()}")
    gate = Gate(tmp_path)
    # A well-formed header, from 127.0.0.1, which the list does not name.
    assert_refused(server, v1("192.0.2.10") + request("GET", gate.target))
    server.wait_for_log(r"WARNING\] refused a request from 127\.0\.0\.1:\d+: a PROXY protocol connection from a peer")
    wait_for(lambda: "rush_proxy_protocol_refused_total 1\n" in metrics(port), "the refusal counted")
    assert not gate.entered.exists()


# Each is refused with no answer. The first three are gunicorn's invalid pp_*
# cases in other bytes; the "no header" case is its valid pp_03, which rush
# refuses (see the module's docstring).
MALFORMED = {
    "cut address": b"PROXY TCP4 198.51.100.1 198.51...\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "port not a number": b"PROXY TCP4 198.51.100.1 198.51.100.11 80x 100000\r\n",
    "source not an address": b"PROXY TCP4 an-address 198.51.100.11 56324 443\r\n",
    "no header": request("GET", "/origin"),
    "TLS without a header": b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\0" * 40,
    "lower case": b"proxy TCP4 192.0.2.1 192.0.2.2 1 2\r\n",
    "bare LF": b"PROXY TCP4 192.0.2.1 192.0.2.2 1 2\n",
    "TCP6 with IPv4 addresses": b"PROXY TCP6 192.0.2.1 192.0.2.2 1 2\r\n",
    "leading zero port": b"PROXY TCP4 192.0.2.1 192.0.2.2 01 2\r\n",
    "v1 over 107 bytes": b"PROXY UNKNOWN " + b"x" * 120 + b"\r\n",
    "v2 version 3": V2_SIGNATURE + b"\x31\x11\x00\x0c" + b"\0" * 12,
    "v2 unknown command": V2_SIGNATURE + b"\x22\x11\x00\x0c" + b"\0" * 12,
    "v2 shorter than its addresses": V2_SIGNATURE + b"\x21\x11\x00\x04" + b"\0" * 4,
    "v2 over the length cap": V2_SIGNATURE + b"\x21\x11\x10\x00",
    "v2 cut TLV": v2(tlvs=b"\x02\x00\x10abc"),
    "v2 UDP": V2_SIGNATURE + b"\x21\x12\x00\x0c" + b"\0" * 12,
}


@pytest.fixture(scope="module")
def refusing_server(module_servers: ServerFactory) -> tuple[RushServer, int]:
    port = free_port()
    server = module_servers("fronted", "--proxy-protocol", "--metrics", f"127.0.0.1:{port}", wait=False)
    return wait_ready(server), port


def refused_count(port: int) -> int:
    found = re.search(r"^rush_proxy_protocol_refused_total (\d+)$", metrics(port), re.MULTILINE)
    assert found, "no rush_proxy_protocol_refused_total in the metrics"
    return int(found[1])


@pytest.mark.parametrize("data", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_and_missing_headers_are_refused(refusing_server: tuple[RushServer, int], data: bytes) -> None:
    server, port = refusing_server
    before = refused_count(port)
    assert_refused(server, data)
    # Counted as a refusal (the log lines are rate-limited, the count is not).
    wait_for(lambda: refused_count(port) == before + 1, "the refusal counted")


def test_refusals_are_logged_with_their_reason(rush_server: ServerFactory) -> None:
    server = start(rush_server, "fronted")
    assert_refused(server, MALFORMED["source not an address"])
    server.wait_for_log(r"WARNING\] refused a request from 127\.0\.0\.1:\d+: PROXY protocol: a malformed v1 header")
    assert_refused(server, MALFORMED["no header"])
    server.wait_for_log(r"refused a request from 127\.0\.0\.1:\d+: PROXY protocol: no PROXY protocol header")


def test_a_header_cut_short_is_refused_when_the_client_stops(rush_server: ServerFactory) -> None:
    server = start(rush_server, "fronted")
    assert_refused(server, v1()[:20], shut=True)
    assert_refused(server, v2()[:20], shut=True)
    server.wait_for_log(r"PROXY protocol: the peer closed in the middle of the PROXY protocol header", 2)


def test_a_stalled_header_is_refused_at_the_header_timeout(rush_server: ServerFactory) -> None:
    server = start(rush_server, "fronted", "--header-timeout", "1")
    for partial in (v1()[:20], v2()[:20]):
        with server.connect() as connection:
            connection.send(partial)
            # The guard (15 s) far exceeds the header timeout: the close
            # comes from the sweep, not from the client.
            connection.assert_closed()
    server.wait_for_log(r"PROXY protocol: no complete header within --header-timeout", 2)


# -- gunicorn's valid cases, rewritten --------------------------------------------------------------


def test_gunicorn_style_valid_requests(rush_server: ServerFactory) -> None:
    server = start(rush_server, "asgi_apps")
    # pp_01: an HTTP/1.0 request with a body after a v1 header.
    with server.connect() as connection:
        body = b'{"nom": "nom"}'
        connection.send(v1("198.51.100.1", 56324) + request("POST", "/echo", body=body, version="HTTP/1.0"))
        echoed = connection.read_response().json()
        assert sum(message["length"] for message in echoed) == len(body)
    # pp_02: keep-alive, then a chunked POST, on one connection.
    with server.connect() as connection:
        connection.send(v1("198.51.100.1", 56324) + request("GET", "/scope", [("Connection", "keep-alive")]))
        assert connection.read_response().json()["client"] == ["198.51.100.1", 56324]
        connection.send(
            request(
                "POST",
                "/echo",
                [("Transfer-Encoding", "chunked")],
                body=chunked(b"all your base"),
                content_length=False,
            )
        )
        assert sum(message["length"] for message in connection.read_response().json()) == len(b"all your base")
    # pp_04 and pp_05: v2 over IPv4 and IPv6, no TLVs.
    assert client_seen(server, "asgi", v2("192.168.1.10", 12345)) == ("192.168.1.10", 12345)
    assert client_seen(server, "asgi", v2("2001:db8::1", 12345)) == ("2001:db8::1", 12345)


# -- TLS and HTTP/2 after the header ----------------------------------------------------------------


class HeaderFirst(httpcore.SyncBackend):
    """httpcore's own socket backend, writing a PROXY header on every new
    connection before TLS or HTTP starts."""

    def __init__(self, header: bytes) -> None:
        super().__init__()
        self.header = header

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        stream = super().connect_tcp(*args, **kwargs)
        stream.write(self.header)
        return stream


def fetch(url: str, header: bytes, context: ssl.SSLContext | None = None, http2: bool = True) -> tuple[str, Any]:
    with httpcore.ConnectionPool(
        ssl_context=context, http1=not http2, http2=http2, network_backend=HeaderFirst(header)
    ) as pool:
        response = pool.request("GET", url, extensions={"timeout": {"pool": GUARD_TIMEOUT, "read": GUARD_TIMEOUT}})
        assert response.status == 200, response
        return response.extensions["http_version"].decode(), httpx.Response(200, content=response.content).json()


def test_tls_after_the_header_http1_and_http2(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    server = start(rush_server, "asgi_apps", *tls_args(pki))
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    url = f"https://127.0.0.1:{server.port}/scope"
    version, scope = fetch(url, v2("192.0.2.77", 2222), context, http2=True)
    assert (version, scope["client"], scope["scheme"]) == ("HTTP/2", ["192.0.2.77", 2222], "https")
    version, scope = fetch(url, v1("192.0.2.78", 3333), context, http2=False)
    assert (version, scope["client"], scope["scheme"]) == ("HTTP/1.1", ["192.0.2.78", 3333], "https")
    # TLS first, with no header: refused before the handshake.
    with pytest.raises(httpcore.ConnectError), httpcore.ConnectionPool(ssl_context=context) as pool:
        pool.request("GET", url)


def test_h2c_prior_knowledge_after_the_header(rush_server: ServerFactory) -> None:
    server = start(rush_server, "asgi_apps")
    version, scope = fetch(f"http://127.0.0.1:{server.port}/scope", v1("192.0.2.79", 4444))
    assert (version, scope["client"]) == ("HTTP/2", ["192.0.2.79", 4444])


# -- the oracle: a real HAProxy in front ------------------------------------------------------------

HAPROXY = shutil.which("haproxy")

HAPROXY_CONFIG = """
global
    maxconn 100
defaults
    mode tcp
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend v1
    bind 127.0.0.1:{v1_port}
    default_backend rush_v1
frontend v2
    bind 127.0.0.1:{v2_port}
    default_backend rush_v2
backend rush_v1
    server rush 127.0.0.1:{rush_port} send-proxy
backend rush_v2
    server rush 127.0.0.1:{rush_port} send-proxy-v2
"""

# HAProxy ending TLS itself and passing what it saw as v2 TLVs.
HAPROXY_TLS_CONFIG = """
frontend tls
    bind 127.0.0.1:{tls_port} ssl crt {combined} ca-file {ca} verify optional
    default_backend rush_tls
backend rush_tls
    server rush 127.0.0.1:{rush_port} send-proxy-v2 proxy-v2-options ssl,cert-cn,ssl-cipher,authority
"""


class HAProxy:
    """HAProxy in the foreground, as the test's own child, stopped by PID."""

    def __init__(self, directory: Path, rush_port: int, pki: dict[str, Path] | None = None) -> None:
        self.ports = {"v1": free_port(), "v2": free_port()}
        config = HAPROXY_CONFIG.format(v1_port=self.ports["v1"], v2_port=self.ports["v2"], rush_port=rush_port)
        if pki is not None:
            self.ports["tls"] = free_port()
            combined = directory / "haproxy.pem"
            combined.write_bytes(pki["chain"].read_bytes() + pki["key"].read_bytes())
            config += HAPROXY_TLS_CONFIG.format(
                tls_port=self.ports["tls"], combined=combined, ca=pki["ca"], rush_port=rush_port
            )
        (directory / "haproxy.cfg").write_text(config)
        self.log = directory / "haproxy.stderr"
        with open(self.log, "wb") as stderr:
            self.proc = subprocess.Popen(
                [str(HAPROXY), "-db", "-f", str(directory / "haproxy.cfg")], stdin=subprocess.DEVNULL, stderr=stderr
            )
        for port in self.ports.values():
            wait_for(lambda port=port: self.accepting(port), f"haproxy on {port}\n{self.log.read_text()}")

    def accepting(self, port: int) -> bool:
        assert self.proc.poll() is None, f"haproxy exited\n{self.log.read_text()}"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(GUARD_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def haproxy(tmp_path: Path) -> Iterator[Any]:
    started: list[HAProxy] = []

    def make(rush_port: int, pki: dict[str, Path] | None = None) -> HAProxy:
        started.append(HAProxy(tmp_path, rush_port, pki))
        return started[-1]

    yield make
    for proxy in started:
        proxy.stop()


def from_second_loopback(port: int) -> Connection:
    """A raw connection to ``port`` from 127.0.0.2, another loopback address."""
    connection = Connection.__new__(Connection)
    connection.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    connection.sock.settimeout(GUARD_TIMEOUT)
    connection.sock.bind(("127.0.0.2", 0))
    connection.sock.connect(("127.0.0.1", port))
    connection.timeout, connection.buffer, connection.finals_read = GUARD_TIMEOUT, b"", 0
    connection.eof = connection.reset = False
    return connection


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is installed by `make test-tools`")
@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
def test_behind_haproxy_the_app_sees_the_client_haproxy_saw(
    rush_server: ServerFactory, haproxy: Any, interface: str
) -> None:
    server = start(rush_server, INTERFACES[interface][0], "--access-log")
    proxy = haproxy(server.port)
    for version in ("v1", "v2"):
        with from_second_loopback(proxy.ports[version]) as connection:
            own = connection.sock.getsockname()
            connection.send(request("GET", INTERFACES[interface][1]))
            assert INTERFACES[interface][2](connection.read_response().json()) == own, version
            server.wait_for_log(rf"127\.0\.0\.2:{own[1]} - \"GET ", stream="stdout")
    # The same client straight to rush, with a header claiming another
    # address: 127.0.0.2 is not a trusted peer, so it is refused.
    with from_second_loopback(server.port) as connection:
        connection.send(v1("192.0.2.1") + request("GET", INTERFACES[interface][1]))
        connection.assert_closed()


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is installed by `make test-tools`")
def test_behind_haproxy_a_websocket_sees_the_client(rush_server: ServerFactory, haproxy: Any) -> None:
    server = start(rush_server, "tests.apps.ws_apps:asgi_app")
    proxy = haproxy(server.port)
    for version in ("v1", "v2"):
        with from_second_loopback(proxy.ports[version]) as connection:
            own = connection.sock.getsockname()
            connection.send(upgrade_request("/scope"))
            assert read_head(connection).startswith(b"HTTP/1.1 101 ")
            assert json.loads(read_frame(connection)[1])["client"] == list(own), version


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is installed by `make test-tools`")
def test_behind_haproxy_tls_passed_through_with_http2(
    rush_server: ServerFactory, haproxy: Any, pki: dict[str, Path]
) -> None:
    server = start(rush_server, "asgi_apps", *tls_args(pki))
    proxy = haproxy(server.port)
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    for version in ("v1", "v2"):
        transport = httpx.HTTPTransport(verify=context, http2=True, http1=False, local_address="127.0.0.2")
        with httpx.Client(transport=transport, timeout=GUARD_TIMEOUT) as client:
            response = client.get(f"https://127.0.0.1:{proxy.ports[version]}/scope")
        assert response.http_version == "HTTP/2"
        scope = response.json()
        assert (scope["client"][0], scope["scheme"]) == ("127.0.0.2", "https"), version
        assert scope["http_version"] == "2"


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is installed by `make test-tools`")
def test_behind_haproxy_ending_tls_the_app_reads_its_tls_tlvs(
    rush_server: ServerFactory, haproxy: Any, pki: dict[str, Path]
) -> None:
    server = start(rush_server, "asgi_apps")
    proxy = haproxy(server.port, pki)
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    context.load_cert_chain(str(pki["client"]))
    raw = socket.create_connection(("127.0.0.1", proxy.ports["tls"]), timeout=GUARD_TIMEOUT)
    with context.wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(request("GET", "/scope", [("Connection", "close")], host="localhost"))
        received = b""
        while chunk := tls.recv(65536):
            received += chunk
        # What this client negotiated with HAProxy is what rush must report.
        version, cipher = tls.version(), tls.cipher()[0]
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), received[:300]
    scope = json.loads(body)
    assert scope["client"][0] == "127.0.0.1"
    info = scope["extensions"]["proxy_protocol"]
    assert info["authority"] == "localhost"
    ssl_info = info["ssl"]
    assert (ssl_info["version"], ssl_info["cipher"], ssl_info["cn"]) == (version, cipher, "client one")
    # PP2_CLIENT_SSL and a certificate on this connection, verified.
    assert ssl_info["client"] & 0x03 == 0x03 and ssl_info["verify"] == 0
