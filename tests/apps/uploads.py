"""Apps for tests/test_uploads.py: each answers with the size and SHA-256 of
the request body it read, reading it in pieces so the app itself never holds
a large upload.

* ``asgi_app``: reads ``receive()`` as the body comes (rush's streamed path).
* ``wsgi_app``: reads ``wsgi.input``, which rush collected (and spooled)
  before the call. With ``?dir=D&name=N`` in the query it keeps its input
  open at a gate (tests/support.py ``Gate``) after reading it: ``N.entered``
  is written, and it answers once ``N.release`` exists.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

PIECE = 1024 * 1024
# A gated request waits at most this long for its release file.
GATE_LIMIT = 60.0


async def asgi_app(scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
    if scope["type"] != "http":
        return
    digest = hashlib.sha256()
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body = message.get("body", b"")
        digest.update(body)
        size += len(body)
        if not message.get("more_body", False):
            break
    answer = json.dumps({"size": size, "sha256": digest.hexdigest()}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": answer})


def wsgi_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    stream = environ["wsgi.input"]
    digest = hashlib.sha256()
    size = 0
    while piece := stream.read(PIECE):
        digest.update(piece)
        size += len(piece)
    query = dict(part.split("=", 1) for part in environ.get("QUERY_STRING", "").split("&") if "=" in part)
    if "dir" in query:
        wait_at_gate(query["dir"], query["name"])
    answer = json.dumps({"size": size, "sha256": digest.hexdigest()}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [answer]


def wait_at_gate(directory: str, name: str) -> None:
    with open(os.path.join(directory, f"{name}.entered"), "w") as entered:
        entered.write(str(os.getpid()))
    release = os.path.join(directory, f"{name}.release")
    deadline = time.monotonic() + GATE_LIMIT
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the gate")
        time.sleep(0.01)
