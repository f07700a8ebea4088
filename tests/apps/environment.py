"""A WSGI app answering with its worker's environment variables (a JSON
object), for tests of what rush puts in, or leaves out of, the app's environment."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any


def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    body = json.dumps(dict(os.environ)).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
