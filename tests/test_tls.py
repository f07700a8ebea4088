"""HTTPS served directly (rustls), over real sockets: a test CA and
certificates made here with trustme, clients from httpx and Python's ssl.

Covers keep-alive and pipelining over TLS, the scheme reaching WSGI and
ASGI apps, static files (memory cache, Range, and a large file read through
TLS instead of sendfile), records split into single bytes, plain HTTP sent
to the TLS port, client certificates, and start-up errors for bad files."""

from __future__ import annotations

import json
import resource
import signal
import socket
import ssl
from pathlib import Path

import httpx
import pytest
import trustme
from support import (
    GUARD_TIMEOUT,
    RushServer,
    ServerFactory,
    parse_responses,
    request,
    socket_fd_count,
    wait_for,
)


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def pki(ca: trustme.CA, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    server = ca.issue_cert("localhost", "127.0.0.1", key_type=trustme.KeyType.ECDSA)
    paths = {name: directory / f"{name}.pem" for name in ("ca", "chain", "key", "client", "other_key")}
    ca.cert_pem.write_to_path(paths["ca"])
    server.private_key_pem.write_to_path(paths["key"])
    # The leaf first, then the rest of the chain.
    paths["chain"].write_bytes(b"".join(blob.bytes() for blob in server.cert_chain_pems))
    client = ca.issue_cert("client@example.com")
    client.private_key_and_cert_chain_pem.write_to_path(paths["client"])
    ca.issue_cert("other.example").private_key_pem.write_to_path(paths["other_key"])
    return paths


def tls_args(pki: dict[str, Path], *extra: str) -> list[str]:
    return ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"]), *extra]


def https(server: RushServer) -> str:
    return f"https://127.0.0.1:{server.port}"


def client_context(pki: dict[str, Path], with_certificate: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    if with_certificate:
        context.load_cert_chain(str(pki["client"]))
    return context


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, pki: dict[str, Path]) -> RushServer:
    return module_servers("basic", *tls_args(pki))


def tls_connection(server: RushServer, context: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT)
    return context.wrap_socket(raw, server_hostname="localhost")


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_https_keep_alive_with_a_verified_certificate(server: RushServer, pki: dict[str, Path]) -> None:
    with httpx.Client(verify=client_context(pki), timeout=GUARD_TIMEOUT) as client:
        answers = [client.get(f"{https(server)}/") for _ in range(3)]
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert answers[0].http_version == "HTTP/1.1"


def test_pipelined_requests_over_tls_are_answered_in_order(server: RushServer, pki: dict[str, Path]) -> None:
    with tls_connection(server, client_context(pki)) as sock:
        sock.sendall(request("GET", "/") + request("GET", "/missing") + request("GET", "/", [("Connection", "close")]))
        responses, _ = parse_responses(read_until_closed(sock))
    assert [response.status for response in responses] == [200, 404, 200]


def test_a_large_upload_sent_at_once_is_read_whole(server: RushServer, pki: dict[str, Path]) -> None:
    # A TLS read returns a record's plaintext at a time: the loop reads on
    # until the socket is drained, or a body already all sent would wait for
    # an edge that never comes (it stalled until --body-timeout).
    body = b"u" * (3 * 1024 * 1024)
    with tls_connection(server, client_context(pki)) as sock:
        sock.sendall(request("POST", "/echo", [("Connection", "close")], body=body))
        answer = read_until_closed(sock)
    (response,), _ = parse_responses(answer)
    assert response.status == 200
    assert response.json()["body_length"] == len(body)


def test_records_split_into_single_bytes(server: RushServer, pki: dict[str, Path]) -> None:
    """The handshake and the request arrive one byte per segment."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(pki).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def send_bytewise() -> None:
            for byte in outgoing.read():
                sock.sendall(bytes([byte]))

        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                send_bytewise()
                incoming.write(sock.recv(65536))
        tls.write(request("GET", "/", [("Connection", "close")]))
        send_bytewise()
        received = b""
        while True:
            try:
                chunk = tls.read(65536)
            except ssl.SSLWantReadError:
                data = sock.recv(65536)
                if not data:
                    break
                incoming.write(data)
                continue
            except ssl.SSLZeroReturnError:
                break
            if not chunk:
                break
            received += chunk
    responses, _ = parse_responses(received)
    assert [response.status for response in responses] == [200]


PLAIN_HINT = b"This port speaks HTTPS: use an https:// URL\n"


def test_plain_http_on_the_tls_port_gets_a_clear_answer(server: RushServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(request("GET", "/"))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert answer.endswith(PLAIN_HINT)


def test_plain_http_on_the_tls_port_closes_without_a_reset(server: RushServer) -> None:
    """A plain-HTTP client that goes on sending after its request (pipelined
    requests here; a body would do the same) reads the whole hint and a clean
    end, and can go on sending until it closes: the server shuts its write
    side and lingers, discarding, as after any refusal. A server that closed
    at once would answer the later bytes with an RST, which fails the
    client's sends (and, when it meets unread bytes, replaces the FIN)."""
    pipelined = request("GET", "/next") * 20  # about 1 KiB
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(request("GET", "/") + pipelined)
        answer = read_until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 400 "), answer
        assert answer.endswith(PLAIN_HINT), answer
        # The server's FIN came; it still reads (and drops) what follows,
        # well under the linger bound (1 MiB).
        for _ in range(256):
            sock.sendall(pipelined)
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""
        # Once the server has let go of its end (on our FIN, when it
        # lingers; at once, when it does not), no RST has reached us.
        client_port = sock.getsockname()[1]
        wait_for(lambda: not server_holds(server.port, client_port), "the server to close its end")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0


def server_holds(server_port: int, client_port: int) -> bool:
    """Whether a process still holds the server's end of the connection from
    ``client_port`` (in /proc/net/tcp a socket no process holds any more,
    orphaned or in TIME_WAIT, has inode 0)."""
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
                if inode != "0":
                    return True
    return False


def test_a_client_that_never_finishes_its_handshake_is_closed(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    server = rush_server("basic", *tls_args(pki, "--header-timeout", "0.5"))
    with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(b"\x16\x03\x01")  # the start of a handshake record, then nothing
        assert read_until_closed(sock) == b""


@pytest.mark.parametrize(
    ("app", "path", "field"),
    [
        ("tests.apps.wsgi_apps:app", "/environ", "wsgi.url_scheme"),
        ("tests.apps.asgi_apps:app", "/scope", "scheme"),
        ("tests.apps.fronted:app", "/origin", "scheme"),
    ],
)
def test_the_scheme_reaches_the_app(
    rush_server: ServerFactory, pki: dict[str, Path], app: str, path: str, field: str
) -> None:
    """Over TLS the scheme is https for the three interfaces (the rush
    App's ``Request.scheme`` included), unless a trusted proxy (the test
    client, from 127.0.0.1) says which scheme it was reached by."""
    server = rush_server(app, *tls_args(pki))
    with httpx.Client(verify=client_context(pki), timeout=GUARD_TIMEOUT) as client:
        described = client.get(f"{https(server)}{path}").json()
        assert described[field] == "https"
        for proto in ("http", "https"):
            described = client.get(f"{https(server)}{path}", headers={"X-Forwarded-Proto": proto}).json()
            assert described[field] == proto


@pytest.mark.parametrize("version", ["TLSv1.3", "TLSv1.2"])
def test_ssl_cipher_has_the_openssl_name(server_wsgi: RushServer, pki: dict[str, Path], version: str) -> None:
    """WSGI's SSL_CIPHER is the suite's OpenSSL name, as mod_ssl gives it
    (and as Python's ssl, built on OpenSSL, names it on the client side)."""
    context = client_context(pki)
    context.maximum_version = getattr(ssl.TLSVersion, version.replace(".", "_"))
    with tls_connection(server_wsgi, context) as sock:
        sock.sendall(request("GET", "/environ", [("Connection", "close")]))
        (response,), _ = parse_responses(read_until_closed(sock))
        expected = sock.cipher()[0]
    environ = json.loads(response.body)
    assert environ["SSL_PROTOCOL"] == version
    assert environ["SSL_CIPHER"] == expected
    assert "TLS13_" not in expected and "_WITH_" not in expected


@pytest.fixture(scope="module")
def server_wsgi(module_servers: ServerFactory, pki: dict[str, Path]) -> RushServer:
    return module_servers("tests.apps.wsgi_apps:app", *tls_args(pki))


def test_static_files_over_tls(rush_server: ServerFactory, pki: dict[str, Path], tmp_path: Path) -> None:
    small = bytes(range(256)) * 16
    large = bytes(range(251)) * (2 * 1024 * 1024 // 251)
    (tmp_path / "small.bin").write_bytes(small)
    (tmp_path / "large.bin").write_bytes(large)
    mounts = json.dumps([{"prefix": "/files", "directory": str(tmp_path)}])
    server = rush_server("static_site", *tls_args(pki), env={"RUSHTEST_STATIC_MOUNTS": mounts})
    with httpx.Client(verify=client_context(pki), timeout=GUARD_TIMEOUT) as client:
        assert client.get(f"{https(server)}/files/small.bin").content == small
        ranged = client.get(f"{https(server)}/files/small.bin", headers={"Range": "bytes=100-199"})
        assert ranged.status_code == 206 and ranged.content == small[100:200]
        # Larger than the memory cache keeps: read from the file and encrypted.
        assert client.get(f"{https(server)}/files/large.bin").content == large
        tail = client.get(f"{https(server)}/files/large.bin", headers={"Range": f"bytes={len(large) - 10}-"})
        assert tail.status_code == 206 and tail.content == large[-10:]


def test_client_certificates_required(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    args = tls_args(pki, "--ssl-ca-certs", str(pki["ca"]), "--ssl-cert-reqs", "required")
    server = rush_server("basic", *args)
    with tls_connection(server, client_context(pki, with_certificate=True)) as sock:
        sock.sendall(request("GET", "/", [("Connection", "close")]))
        responses, _ = parse_responses(read_until_closed(sock))
    assert [response.status for response in responses] == [200]
    with pytest.raises((ssl.SSLError, ConnectionError)):
        with tls_connection(server, client_context(pki)) as sock:
            sock.sendall(request("GET", "/", [("Connection", "close")]))
            read_until_closed(sock)


def test_client_certificates_optional(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    args = tls_args(pki, "--ssl-ca-certs", str(pki["ca"]), "--ssl-cert-reqs", "optional")
    server = rush_server("basic", *args)
    for with_certificate in (True, False):
        with httpx.Client(verify=client_context(pki, with_certificate), timeout=GUARD_TIMEOUT) as client:
            assert client.get(f"{https(server)}/").status_code == 200


def test_the_client_refuses_a_certificate_for_another_host(server: RushServer, pki: dict[str, Path]) -> None:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT)
    with pytest.raises(ssl.SSLCertVerificationError):
        client_context(pki).wrap_socket(raw, server_hostname="elsewhere.example")
    raw.close()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--ssl-keyfile": "other_key"}, "does not fit the certificate"),
        ({"--ssl-certfile": "missing"}, "cannot read the certificate file"),
        ({"--ssl-keyfile": "ca"}, "cannot read a private key"),
    ],
)
def test_bad_certificate_files_stop_rush_before_it_forks(
    rush_server: ServerFactory, pki: dict[str, Path], change: dict[str, str], message: str
) -> None:
    args = tls_args(pki)
    for flag, name in change.items():
        args[args.index(flag) + 1] = str(pki.get(name, pki["ca"].parent / "missing.pem"))
    server = rush_server("basic", *args, wait=False)
    assert server.wait_exit() == 2
    stderr = server.stderr_path.read_text()
    assert message in stderr and "started worker" not in stderr


def test_https_is_named_in_the_banner(server: RushServer) -> None:
    wait_for(lambda: "serving on https://" in server.stderr_path.read_text(), "the banner")


def test_sighup_serves_renewed_certificates(rush_server: ServerFactory, pki: dict[str, Path], tmp_path: Path) -> None:
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    chain.write_bytes(pki["chain"].read_bytes())
    key.write_bytes(pki["key"].read_bytes())
    server = rush_server("basic", "--ssl-certfile", str(chain), "--ssl-keyfile", str(key))
    with httpx.Client(verify=client_context(pki), timeout=GUARD_TIMEOUT) as client:
        assert client.get(f"{https(server)}/").status_code == 200
    # Renewed by another CA: after SIGHUP, new workers load the new files.
    renewed_ca = trustme.CA()
    renewed = renewed_ca.issue_cert("localhost", "127.0.0.1")
    chain.write_bytes(b"".join(blob.bytes() for blob in renewed.cert_chain_pems))
    key.write_bytes(renewed.private_key_pem.bytes())
    renewed_context = ssl.create_default_context()
    renewed_ca.configure_trust(renewed_context)
    server.send_signal(signal.SIGHUP)

    def serves_renewed() -> bool:
        try:
            with tls_connection(server, renewed_context):
                return True
        except ssl.SSLError:
            return False

    wait_for(serves_renewed, "the renewed certificate after SIGHUP")


def test_the_certificate_is_chosen_by_the_name_the_client_asks_for(
    rush_server: ServerFactory, ca: trustme.CA, pki: dict[str, Path], tmp_path: Path
) -> None:
    other = ca.issue_cert("api.example.test")
    other_chain, other_key = tmp_path / "api.pem", tmp_path / "api-key.pem"
    other_chain.write_bytes(b"".join(blob.bytes() for blob in other.cert_chain_pems))
    other.private_key_pem.write_to_path(other_key)
    args = tls_args(pki, "--ssl-certfile", str(other_chain), "--ssl-keyfile", str(other_key))
    server = rush_server("basic", *args)
    for name in ("api.example.test", "localhost"):
        with tls_connection_named(server, client_context(pki), name) as sock:
            assert sock.version() in ("TLSv1.3", "TLSv1.2"), name
    # A name no certificate covers gets the first one (which then fails to verify).
    with pytest.raises(ssl.SSLCertVerificationError):
        tls_connection_named(server, client_context(pki), "unknown.example.test")


def tls_connection_named(server: RushServer, context: ssl.SSLContext, name: str) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT)
    try:
        return context.wrap_socket(raw, server_hostname=name)
    except BaseException:
        raw.close()
        raise


def test_handshakes_in_progress_are_capped_and_established_clients_go_on(
    rush_server: ServerFactory, pki: dict[str, Path]
) -> None:
    server = rush_server("basic", *tls_args(pki, "--ssl-max-handshakes", "4"))
    with httpx.Client(verify=client_context(pki), timeout=GUARD_TIMEOUT) as established:
        assert established.get(f"{https(server)}/").status_code == 200
        stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) for _ in range(4)]
        try:
            for sock in stalled:
                sock.sendall(b"\x16\x03\x01")  # a handshake begun, never finished
            # Past the cap, a newcomer is closed at once.
            with socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) as newcomer:
                newcomer.sendall(b"\x16\x03\x01")
                try:
                    assert newcomer.recv(1024) == b""
                except ConnectionResetError:
                    pass
            assert established.get(f"{https(server)}/").status_code == 200, "an established client goes on"
            # The refusal is not silent: a rate-limited warning names the limit.
            wait_for(
                lambda: (
                    "TLS handshakes refused" in server.stderr_text() and "--ssl-max-handshakes" in server.stderr_text()
                ),
                "a warning about the refused handshake",
            )
        finally:
            for sock in stalled:
                sock.close()
        # Once they are gone, handshakes are accepted again.
        wait_for(lambda: serves_a_new_client(server, pki), "a new handshake after the stalled ones left")


def test_silent_sockets_do_not_hold_handshake_slots(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    """A thousand TCP connections that never send a byte (four times the
    default handshake cap) leave a newcomer's handshake untouched: only a
    handshake that has begun counts against --ssl-max-handshakes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    # A long header timeout: every silent socket stays open for the test.
    server = rush_server("basic", *tls_args(pki, "--header-timeout", "120"))
    worker = server.single_worker()
    # The worker's own sockets, give or take the start-up probe's connection,
    # which may still be closing: a little slack below.
    baseline = socket_fd_count(worker) - 2
    silent = []
    try:
        # In batches below the listen backlog (128), each accepted by the
        # worker before the next, so none waits on SYN-ACK retransmits.
        for _ in range(10):
            silent += [socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) for _ in range(100)]
            wanted = baseline + len(silent)
            wait_for(
                lambda wanted=wanted: socket_fd_count(worker) >= wanted, "the worker holds every silent socket so far"
            )
        for _ in range(3):
            with httpx.Client(verify=client_context(pki), timeout=GUARD_TIMEOUT) as newcomer:
                assert newcomer.get(f"{https(server)}/").status_code == 200
        # None of them was closed to make room.
        assert socket_fd_count(worker) >= baseline + 1000
        assert "--ssl-max-handshakes" not in server.stderr_text()
    finally:
        for sock in silent:
            sock.close()


def test_at_max_connections_a_silent_socket_makes_room_for_a_newcomer(
    rush_server: ServerFactory, pki: dict[str, Path]
) -> None:
    """Silent sockets count as idle connections: at --max-connections the
    oldest is closed for a newcomer, which completes its handshake."""
    server = rush_server("basic", *tls_args(pki, "--max-connections", "10", "--header-timeout", "120"))
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT) for _ in range(10)]
    try:
        # The listen queue is first in, first out: the ten are accepted
        # before the newcomer that connects after them.
        with httpx.Client(verify=client_context(pki), timeout=GUARD_TIMEOUT) as newcomer:
            assert newcomer.get(f"{https(server)}/").status_code == 200
        # The oldest silent socket was closed to make room.
        assert silent[0].recv(1) == b""
        server.wait_for_log(r"WARNING.*--max-connections limit")
    finally:
        for sock in silent:
            sock.close()


def serves_a_new_client(server: RushServer, pki: dict[str, Path]) -> bool:
    try:
        with tls_connection(server, client_context(pki)):
            return True
    except (ssl.SSLError, ConnectionError):
        return False


def test_sessions_resume_with_any_worker(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    """Ticket keys are shared by the workers: a session resumes whichever
    worker the kernel hands the next connection to."""
    server = rush_server("basic", "--workers", "3", *tls_args(pki))
    context = client_context(pki)
    with tls_connection(server, context) as first:
        first.sendall(request("GET", "/", [("Connection", "close")]))
        read_until_closed(first)  # the server's session ticket arrives with the answer
        session = first.session
    assert session is not None
    resumed = []
    for _ in range(12):
        raw = socket.create_connection(("127.0.0.1", server.port), timeout=GUARD_TIMEOUT)
        with context.wrap_socket(raw, server_hostname="localhost", session=session) as sock:
            sock.sendall(request("GET", "/", [("Connection", "close")]))
            read_until_closed(sock)
            resumed.append(sock.session_reused)
    assert all(resumed), resumed


@pytest.mark.parametrize(
    ("app", "path"), [("tests.apps.wsgi_apps:app", "/environ"), ("tests.apps.asgi_apps:app", "/scope")]
)
def test_the_client_certificate_reaches_the_app(
    rush_server: ServerFactory, pki: dict[str, Path], app: str, path: str
) -> None:
    args = tls_args(pki, "--ssl-ca-certs", str(pki["ca"]), "--ssl-cert-reqs", "required")
    server = rush_server(app, *args)
    with httpx.Client(verify=client_context(pki, with_certificate=True), timeout=GUARD_TIMEOUT) as client:
        described = client.get(f"{https(server)}{path}").json()
    client_pem = pki["client"].read_text()
    if "environ" in path:
        assert described["SSL_PROTOCOL"] == "TLSv1.3" and described["SSL_CLIENT_VERIFY"] == "SUCCESS"
        leaf = described["SSL_CLIENT_CERT"]
    else:
        # Only what rush implements is listed.
        assert sorted(described["extensions"]) == ["http.response.early_hint", "http.response.pathsend", "tls"]
        extension = described["extensions"]["tls"]
        assert extension["tls_version"] == 0x0304 and extension["cipher_suite"] > 0
        leaf = extension["client_cert_chain"][0]
    assert leaf.startswith("-----BEGIN CERTIFICATE-----") and leaf.strip() in client_pem


def test_the_client_refuses_an_expired_certificate(
    rush_server: ServerFactory, ca: trustme.CA, pki: dict[str, Path], tmp_path: Path
) -> None:
    import datetime

    expired = ca.issue_cert("localhost", not_after=datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1))
    chain, key = tmp_path / "expired.pem", tmp_path / "expired-key.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in expired.cert_chain_pems))
    expired.private_key_pem.write_to_path(key)
    server = rush_server("basic", "--ssl-certfile", str(chain), "--ssl-keyfile", str(key))
    with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
        tls_connection(server, client_context(pki))


def test_ssl_ciphers_limits_the_suites(rush_server: ServerFactory, pki: dict[str, Path]) -> None:
    server = rush_server("basic", *tls_args(pki, "--ssl-ciphers", "TLS13_CHACHA20_POLY1305_SHA256"))
    with tls_connection(server, client_context(pki)) as sock:
        assert sock.cipher()[0] == "TLS_CHACHA20_POLY1305_SHA256"
    refused = rush_server("basic", *tls_args(pki, "--ssl-ciphers", "ECDHE-RSA-AES128-SHA"), wait=False)
    assert refused.wait_exit() == 2
    assert "unknown cipher suite" in refused.stderr_path.read_text()
