"""TLS state the supervisor makes before it forks and its workers use.

The session-ticket keys (src/tls_tickets.rs): one page of keys shared by
every worker, so a client resumes its TLS session with whichever worker its
next connection reaches. The supervisor makes them (:func:`share_ticket_keys`)
and rotates them from its loop (:func:`rotate_when_due`); a forked worker
finds them in :data:`ticket_keys` and hands them to its `TlsSettings`.

Encrypted private keys (``--ssl-keyfile-password``, or the first line of
``--ssl-keyfile-password-file``; :func:`key_source`):
decrypted here with the ``cryptography`` package, which reads both
encrypted PKCS#8 (``BEGIN ENCRYPTED PRIVATE KEY``) and OpenSSL's legacy PEM
encryption (``Proc-Type: 4,ENCRYPTED``) in one call, and handed to the
native side as unencrypted PKCS#8 DER; plain keys are read there from their
file. Every process that builds `TlsSettings` (the supervisor, to check
before binding, then each worker) decrypts for itself. Once it has,
:func:`forget_password_variable` takes ``RUSH_SSL_KEYFILE_PASSWORD`` out of
its environment, so the app and the processes it starts cannot read it.
"""

from __future__ import annotations

import os
import re
import time

from rush._rush import TicketKeys
from rush.values import TlsError

#: The environment variable that may hold the keys' password (config.py's RUSH_ prefix).
PASSWORD_VARIABLE = "RUSH_SSL_KEYFILE_PASSWORD"

# A key's PEM block, in a file that may hold certificates too (a combined --ssl-certfile).
_KEY_BLOCK = re.compile(rb"-----BEGIN ((?:ENCRYPTED |RSA |EC )?PRIVATE KEY)-----.*?-----END \1-----", re.DOTALL)

# What marks a PEM key as encrypted: PKCS#8's own label, or OpenSSL's legacy header.
_ENCRYPTED_MARKERS = (b"-----BEGIN ENCRYPTED PRIVATE KEY-----", b"Proc-Type: 4,ENCRYPTED")

#: The key material of ``--http3``'s stateless resets and Retry tokens: drawn once,
#: when the supervisor first imports this module (it loads the certificates before
#: it forks), so every worker of one server recognises the others' connections.
quic_secret = os.urandom(32)

#: The shared keys, once the supervisor made them (None: each worker keeps its own).
ticket_keys: TicketKeys | None = None
_next_rotation = 0.0


def share_ticket_keys() -> TicketKeys:
    """Makes the shared keys (before forking); idempotent."""
    global ticket_keys, _next_rotation
    if ticket_keys is None:
        ticket_keys = TicketKeys()
        _next_rotation = time.monotonic() + TicketKeys.rotation_seconds()
    return ticket_keys


def rotate_when_due(now: float) -> None:
    """Draws a new key once a rotation period has passed (the supervisor's loop)."""
    global _next_rotation
    if ticket_keys is not None and now >= _next_rotation:
        ticket_keys.rotate()
        _next_rotation = now + TicketKeys.rotation_seconds()


def key_source(path: str, password: str | None) -> str | tuple[str, bytes]:
    """What `TlsSettings` loads ``path``'s key from: the path itself for a
    plain key (or one that cannot be read: the native side reports that), or
    ``(path, PKCS#8 DER)`` for an encrypted key, decrypted with ``password``.
    Raises `TlsError` (one line) for an encrypted key without a password, or
    with a wrong one."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError:
        return path
    if not any(marker in data for marker in _ENCRYPTED_MARKERS):
        return path  # a password given for a plain key is ignored, as uvicorn's ssl module does
    if password is None:
        raise TlsError(
            f"the private key in {path} is encrypted: give its password with --ssl-keyfile-password "
            "(or RUSH_SSL_KEYFILE_PASSWORD)"
        )
    try:
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization
    except ImportError:
        raise TlsError(
            "--ssl-keyfile-password needs the cryptography package: pip install 'rush-server[encrypted-keys]'"
        ) from None
    block = _KEY_BLOCK.search(data)
    try:
        key = serialization.load_pem_private_key(block.group(0) if block else data, password.encode())
    except ValueError:
        raise TlsError(f"cannot decrypt the private key in {path}: wrong --ssl-keyfile-password?") from None
    except UnsupportedAlgorithm as error:
        raise TlsError(f"cannot decrypt the private key in {path}: {error}") from None
    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return path, der


def read_password_file(path: str) -> str:
    """The password in ``path``'s first line (without its line end), as
    nginx's ``ssl_password_file`` reads one; raises `TlsError` if the file
    cannot be read."""
    try:
        with open(path, encoding="utf-8") as file:
            return file.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) else "not UTF-8 text"
        raise TlsError(f"cannot read --ssl-keyfile-password-file {path}: {reason}") from None


def forget_password_variable() -> None:
    """Takes the password variable out of this process's environment (the
    keys are loaded; a forked worker then inherits it gone)."""
    os.environ.pop(PASSWORD_VARIABLE, None)
