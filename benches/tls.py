"""The certificate every server of the ``tls`` group serves, and TLS for the checks.

One ECDSA P-256 certificate (self-signed, for 127.0.0.1 and localhost) is
made with ``openssl`` the first time it is needed and kept in
benches/.tools/tls/, so every server and every run of a session present the
same certificate and key: the handshake costs the same work everywhere
(TLS 1.3, X25519 or P-256 key exchange, an ECDSA signature). The checks
(benches/httpcheck.py) connect through TLS without verifying the
certificate: they judge the HTTP answers, not the PKI.
"""

from __future__ import annotations

import socket
import ssl
import subprocess
from pathlib import Path

from benches import REPO_ROOT

TLS_DIR = REPO_ROOT / "benches" / ".tools" / "tls"
CERTFILE = TLS_DIR / "cert.pem"
KEYFILE = TLS_DIR / "key.pem"


def ensure_certificate() -> tuple[Path, Path]:
    """The certificate and key files, made once (raises if openssl fails)."""
    if not (CERTFILE.exists() and KEYFILE.exists()):
        TLS_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-days", "30", "-subj", "/CN=localhost",
                "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
                "-keyout", str(KEYFILE), "-out", str(CERTFILE),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip
    return CERTFILE, KEYFILE


def wrap(sock: socket.socket) -> ssl.SSLSocket:
    """A client TLS connection over ``sock``, TLS 1.3, certificate not verified."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    return context.wrap_socket(sock, server_hostname="localhost")
