"""A WSGI app answering with the names of its worker's environment variables
(JSON), for tests of what rush leaves in the environment of the app."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = json.dumps(sorted(os.environ)).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
