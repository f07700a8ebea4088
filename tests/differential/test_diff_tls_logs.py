"""Differential tests over HTTPS and of the access log: the scheme each interface reports, the
TLS variables of the WSGI environ, certificate files as uvicorn reads them (the key in the
certificate's own file, plain or encrypted), and a gunicorn access-log format's line."""

from __future__ import annotations

import json
import re
import socket
import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from harness import Pair, Side, start_pair
from support import GUARD_TIMEOUT, ServerFactory, request, wait_for, write_localhost_pki

ACCESS_FORMAT = '%(h)s %(l)s %(u)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("pki"))


def tls(pki: dict[str, Path], reference: str) -> dict[str, list[str]]:
    rush = ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])]
    if reference == "uvicorn":
        return {"rush_args": rush, "reference_args": rush}
    return {"rush_args": rush, "reference_args": ["--certfile", str(pki["chain"]), "--keyfile", str(pki["key"])]}


@pytest.fixture(scope="module")
def asgi_tls(module_servers: ServerFactory, pki: dict[str, Path]) -> Pair:
    return start_pair(module_servers, "raw_asgi", "asgi", **tls(pki, "uvicorn"))


@pytest.fixture(scope="module")
def wsgi_tls(module_servers: ServerFactory, pki: dict[str, Path]) -> Pair:
    return start_pair(module_servers, "raw_wsgi", "wsgi", **tls(pki, "gunicorn"))


def https_get(port: int, target: str, pki: dict[str, Path]) -> tuple[bytes, str]:
    """GET over TLS with Python's ssl (OpenSSL); the body and the cipher suite OpenSSL names."""
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    with socket.create_connection(("127.0.0.1", port), timeout=GUARD_TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as sock:
            sock.sendall(request("GET", target, [("Connection", "close")]))
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            return data.partition(b"\r\n\r\n")[2], sock.cipher()[0]


def test_asgi_scheme_over_https(asgi_tls: Pair, pki: dict[str, Path]) -> None:
    asgi_tls.check("https-scheme", lambda side: https_get(side.server.port, "/scheme", pki)[0].decode())


def test_rush_app_scheme_over_https(rush_server: ServerFactory, asgi_tls: Pair, pki: dict[str, Path]) -> None:
    """The rush App has no reference server: its Request.scheme must say what the ASGI scope says
    under uvicorn for the same connection."""
    server = rush_server("tests.differential.apps.rush_app:app", *tls(pki, "uvicorn")["rush_args"])
    rush_app = https_get(server.port, "/scheme", pki)[0].decode()
    uvicorn = https_get(asgi_tls.reference.server.port, "/scheme", pki)[0].decode()
    asgi_tls.compare("rush-app-scheme", rush_app, uvicorn)


def test_wsgi_scheme_over_https(wsgi_tls: Pair, pki: dict[str, Path]) -> None:
    def script(side: Side) -> dict:
        environ = json.loads(https_get(side.server.port, "/tls", pki)[0])
        return {"wsgi.url_scheme": environ["wsgi.url_scheme"]}

    wsgi_tls.check("https-scheme", script)


def test_wsgi_ssl_cipher_uses_openssl_names(wsgi_tls: Pair, pki: dict[str, Path]) -> None:
    """gunicorn sets no SSL_CIPHER: the oracle is the name OpenSSL (the client) gives the suite,
    which mod_ssl users parse."""
    environ, cipher = https_get(wsgi_tls.rush.server.port, "/tls", pki)
    assert json.loads(environ)["SSL_CIPHER"] == cipher


@pytest.fixture(scope="module")
def combined(pki: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The chain and its key in one PEM file, the key plain or encrypted (PKCS#8), and the
    password in a file of its own (a second line that is not part of it)."""
    directory = tmp_path_factory.mktemp("combined")
    key = serialization.load_pem_private_key(pki["key"].read_bytes(), None)
    encryption = serialization.BestAvailableEncryption(b"correct horse")
    encrypted = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    paths = {name: directory / f"{name}.pem" for name in ("plain", "encrypted")}
    paths["plain"].write_bytes(pki["chain"].read_bytes() + pki["key"].read_bytes())
    paths["encrypted"].write_bytes(pki["chain"].read_bytes() + encrypted)
    paths["password"] = directory / "password.txt"
    paths["password"].write_text("correct horse\nsomething else\n")
    return paths


def test_a_certificate_file_that_holds_its_key(
    module_servers: ServerFactory, pki: dict[str, Path], combined: dict[str, Path]
) -> None:
    """uvicorn's --ssl-certfile alone reads the key from the same file (load_cert_chain); rush
    refused it before ("--ssl-keyfile must be given once per --ssl-certfile")."""
    args = ["--ssl-certfile", str(combined["plain"])]
    pair = start_pair(module_servers, "raw_asgi:combined_pem", "asgi", rush_args=args, reference_args=args)
    pair.check("combined-pem", lambda side: https_get(side.server.port, "/scheme", pki)[0].decode())


def test_an_encrypted_key_in_the_certificate_file_with_a_password_file(
    module_servers: ServerFactory, pki: dict[str, Path], combined: dict[str, Path]
) -> None:
    """The same file with its key encrypted: uvicorn takes the password as a flag, rush from a
    file (nginx's ssl_password_file), which no process list shows."""
    certificate = ["--ssl-certfile", str(combined["encrypted"])]
    pair = start_pair(
        module_servers,
        "raw_asgi:encrypted_pem",
        "asgi",
        rush_args=[*certificate, "--ssl-keyfile-password-file", str(combined["password"])],
        reference_args=[*certificate, "--ssl-keyfile-password", "correct horse"],
    )
    pair.check("combined-encrypted-pem", lambda side: https_get(side.server.port, "/scheme", pki)[0].decode())


def test_start_up_line_names_the_interface_in_english(asgi_tls: Pair) -> None:
    assert not re.search(r"\bas a asgi\b", asgi_tls.rush.log_text()), asgi_tls.rush.log_text()


@pytest.fixture(scope="module")
def logged(module_servers: ServerFactory) -> Pair:
    return start_pair(
        module_servers,
        "raw_wsgi",
        "wsgi",
        rush_args=["--access-log", "--access-log-format", ACCESS_FORMAT],
        reference_args=["--access-logfile", "-", "--access-logformat", ACCESS_FORMAT],
    )


def test_access_log_line_is_the_format_alone(logged: Pair) -> None:
    def script(side: Side) -> str:
        with side.connect() as connection:
            connection.send(request("GET", "/write?line=1", [("Referer", "http://r/"), ("User-Agent", "diff/1")]))
            connection.read_response()
        # The access line is written after the response: wait for it.
        return wait_for(
            lambda: next((line for line in side.log_text().splitlines() if "/write?line=1" in line), None),
            f"the access line in {side.name}'s log",
        )

    logged.check("access-log", script)
