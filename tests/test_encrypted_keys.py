"""``--ssl-keyfile-password`` (uvicorn's flag, or ``RUSH_SSL_KEYFILE_PASSWORD``)
and ``--ssl-keyfile-password-file``: encrypted private keys made here with
``openssl``, in PKCS#8 (PBKDF2 and scrypt) and in OpenSSL's legacy PEM
encryption (RSA and EC), serve HTTPS to a client that verifies the
certificate; a wrong or missing password, or a password file that cannot be
read, is one error line and exit status 2, and nothing is left listening.
The password variable is gone from the app's environment.
"""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
from pathlib import Path

import httpx
import pytest
from support import (
    GUARD_TIMEOUT,
    RushServer,
    ServerFactory,
    clean_environment,
    free_port,
    run_rush,
    wait_for,
)

OPENSSL = shutil.which("openssl")
PASSWORD = "correct horse"

pytestmark = pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed (make test installs it)")

# How each kind of encrypted key is made from a plain one (openssl subcommand arguments).
ENCRYPTIONS = {
    "pkcs8-aes256-pbkdf2": (["ec"], ["pkcs8", "-topk8", "-v2", "aes-256-cbc"]),
    "pkcs8-scrypt": (["ec"], ["pkcs8", "-topk8", "-scrypt"]),
    "legacy-rsa-aes256": (["rsa"], ["rsa", "-traditional", "-aes256"]),
    "legacy-ec-des3": (["ec"], ["ec", "-des3"]),
}


def openssl(*args: str) -> None:
    subprocess.run([str(OPENSSL), *args], check=True, capture_output=True, timeout=GUARD_TIMEOUT)


def make_pair(directory: Path, encryption: str) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, encrypted the ``encryption`` way."""
    (kind,), command = ENCRYPTIONS[encryption]
    plain, encrypted, cert = directory / "plain.pem", directory / "key.pem", directory / "cert.pem"
    if kind == "rsa":
        openssl("genrsa", "-out", str(plain), "2048")
    else:
        openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(plain))
    openssl(*command, "-in", str(plain), "-out", str(encrypted), "-passout", f"pass:{PASSWORD}")
    plain.unlink()
    openssl(
        *("req", "-x509", "-key", str(encrypted), "-passin", f"pass:{PASSWORD}", "-out", str(cert)),
        *("-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
    )
    return cert, encrypted


@pytest.mark.parametrize("encryption", list(ENCRYPTIONS))
def test_an_encrypted_key_serves_https(rush_server: ServerFactory, tmp_path: Path, encryption: str) -> None:
    cert, key = make_pair(tmp_path, encryption)
    marker = {"legacy": b"Proc-Type: 4,ENCRYPTED", "pkcs8": b"-----BEGIN ENCRYPTED PRIVATE KEY-----"}
    assert marker[encryption.split("-")[0]] in key.read_bytes()
    if encryption.startswith("legacy-rsa"):
        # From the environment, as a deployment would pass it.
        env = clean_environment({"RUSH_SSL_KEYFILE_PASSWORD": PASSWORD})
        server = rush_server("basic", "--ssl-certfile", cert, "--ssl-keyfile", key, env=env, wait=False)
    else:
        server = rush_server(
            "basic", "--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-keyfile-password", PASSWORD, wait=False
        )
    context = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=context, timeout=GUARD_TIMEOUT) as client:
        response = client.get("/pid")
    assert response.status_code == 200
    assert int(response.text) == server.single_worker()


def refused_start(*args: object, env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], int]:
    port = free_port()
    result = run_rush("tests.apps.basic:app", "--port", port, *args, env=env)
    return result, port


def nothing_listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("encryption", ["pkcs8-aes256-pbkdf2", "legacy-ec-des3"])
def test_a_wrong_password_is_one_line_before_anything_is_bound(tmp_path: Path, encryption: str) -> None:
    cert, key = make_pair(tmp_path, encryption)
    result, port = refused_start("--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-keyfile-password", "wrong")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"rush: error: cannot serve HTTPS: cannot decrypt the private key in {key}: wrong --ssl-keyfile-password?"
    ]
    assert nothing_listens(port)


def test_a_missing_password_is_one_line_before_anything_is_bound(tmp_path: Path) -> None:
    cert, key = make_pair(tmp_path, "pkcs8-aes256-pbkdf2")
    result, port = refused_start("--ssl-certfile", cert, "--ssl-keyfile", key)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"rush: error: cannot serve HTTPS: the private key in {key} is encrypted: give its password with "
        "--ssl-keyfile-password (or RUSH_SSL_KEYFILE_PASSWORD)"
    ]
    assert nothing_listens(port)


def test_a_password_for_a_plain_key_is_ignored_as_uvicorn_does(rush_server: ServerFactory, tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    openssl(
        *("req", "-x509", "-key", str(key), "-out", str(cert), "-days", "2"),
        *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
    )
    server = rush_server(
        "basic", "--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-keyfile-password", "unused", wait=False
    )
    context = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=context, timeout=GUARD_TIMEOUT) as client:
        assert client.get("/pid").status_code == 200


def https_get(server: RushServer, cert: Path, target: str) -> httpx.Response:
    context = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(base_url=f"https://127.0.0.1:{server.port}", verify=context, timeout=GUARD_TIMEOUT) as client:
        return client.get(target)


@pytest.mark.parametrize("given", ["flag", "environment"])
def test_a_password_file_decrypts_the_key(rush_server: ServerFactory, tmp_path: Path, given: str) -> None:
    """nginx's ssl_password_file: the password is the file's first line (its line end is not part of it)."""
    cert, key = make_pair(tmp_path, "legacy-ec-des3")
    password_file = tmp_path / "password.txt"
    password_file.write_text(f"{PASSWORD}\nnot the password\n")
    args: list[object] = ["--ssl-certfile", cert, "--ssl-keyfile", key]
    env = None
    if given == "flag":
        args += ["--ssl-keyfile-password-file", password_file]
    else:
        env = clean_environment({"RUSH_SSL_KEYFILE_PASSWORD_FILE": str(password_file)})
    server = rush_server("basic", *args, env=env, wait=False)
    response = https_get(server, cert, "/pid")
    assert (response.status_code, int(response.text)) == (200, server.single_worker())


def test_a_password_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    cert, key = make_pair(tmp_path, "pkcs8-aes256-pbkdf2")
    missing = tmp_path / "no-such-file"
    result, port = refused_start("--ssl-certfile", cert, "--ssl-keyfile", key, "--ssl-keyfile-password-file", missing)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"rush: error: cannot read --ssl-keyfile-password-file {missing}: No such file or directory"
    ]
    assert nothing_listens(port)


def test_a_password_and_a_password_file_are_one_too_many(tmp_path: Path) -> None:
    cert, key = make_pair(tmp_path, "pkcs8-aes256-pbkdf2")
    (tmp_path / "password.txt").write_text(PASSWORD)
    args = ("--ssl-keyfile-password", PASSWORD, "--ssl-keyfile-password-file", tmp_path / "password.txt")
    result, port = refused_start("--ssl-certfile", cert, "--ssl-keyfile", key, *args)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "rush: error: --ssl-keyfile-password-file cannot be given with --ssl-keyfile-password "
        f"(got '{tmp_path / 'password.txt'}')"
    ]
    assert nothing_listens(port)


def test_the_password_variable_is_gone_from_the_apps_environment(rush_server: ServerFactory, tmp_path: Path) -> None:
    """Once the keys are loaded, rush takes RUSH_SSL_KEYFILE_PASSWORD out of its environment: the
    app (and whatever it starts) cannot read it; the variable beside it stays."""
    cert, key = make_pair(tmp_path, "pkcs8-scrypt")
    env = clean_environment({"RUSH_SSL_KEYFILE_PASSWORD": PASSWORD, "RUSHTEST_BESIDE": "kept"})
    server = rush_server("environment", "--ssl-certfile", cert, "--ssl-keyfile", key, env=env, wait=False)
    environment = https_get(server, cert, "/").json()
    assert environment.get("RUSHTEST_BESIDE") == "kept"
    assert environment.get("RUSH_SSL_KEYFILE_PASSWORD") is None
    # A reload (SIGHUP) forks new workers, which decrypt the key again without the variable.
    old = server.single_worker()
    server.send_signal(signal.SIGHUP)
    server.wait_for_log("reload finished")
    wait_for(lambda: server.worker_pids() - {old}, "a new worker after SIGHUP")
    environment = https_get(server, cert, "/").json()
    assert (environment.get("RUSHTEST_BESIDE"), environment.get("RUSH_SSL_KEYFILE_PASSWORD")) == ("kept", None)
