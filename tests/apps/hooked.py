"""A WSGI app for the config-file tests (tests/test_config_file.py), served by
rush and by gunicorn alike: ``/`` answers ``hello <pid>``, ``/environ/NAME``
the value of an environment variable (``-``: unset), and ``/spin`` runs
Python without returning for up to 30 s, so that ``--timeout`` finds its
worker stuck while its main thread still runs Python (``worker_abort``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any

SPIN_LIMIT = 30.0


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    path = environ["PATH_INFO"]
    if path == "/spin":
        deadline = time.monotonic() + SPIN_LIMIT
        while time.monotonic() < deadline:
            sum(range(1000))
        body = b"spun"
    elif path.startswith("/environ/"):
        body = os.environ.get(path.removeprefix("/environ/"), "-").encode()
    else:
        body = f"hello {os.getpid()}".encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
