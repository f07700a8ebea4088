"""A rush App with static mounts configured by the test (tests/test_static.py).

``RUSHTEST_STATIC_MOUNTS`` is a JSON list of ``{"prefix", "directory",
"options"}`` objects, each passed to ``app.static(prefix, directory,
**options)``. Routes (which must win over any mount):

* ``GET /ping`` and ``GET /assets/route``: plain text, from Python;
* ``GET /download?path=...&filename=...&content_type=...&header=...``:
  ``Response.file`` for an absolute path (only the query parameters given
  are passed on); ``POST /download`` the same;
* ``GET /download-missing``: ``Response.file`` for a path that does not exist
  (the handler raises, so the server answers 500);
* ``GET /gate?dir=...&name=...``: holds the worker's loop until the test
  releases it (support.Gate); ``GET /pid``: the worker's PID.
"""

from __future__ import annotations

import json
import os
from typing import Any

from rush import App, Request, Response

from tests.apps._shared import wait_at_gate_blocking

app = App()

for mount in json.loads(os.environ.get("RUSHTEST_STATIC_MOUNTS", "[]")):
    app.static(mount["prefix"], mount["directory"], **mount.get("options", {}))


@app.get("/ping")
def ping(request: Request) -> str:
    return "pong from a route"


@app.get("/assets/route")
def assets_route(request: Request) -> str:
    return "the route wins"


@app.get("/download")
def download(request: Request) -> Response:
    options: dict[str, Any] = {}
    for name in ("filename", "content_type"):
        if name in request.query:
            options[name] = request.query[name]
    if "header" in request.query:
        name, _, value = request.query["header"].partition(":")
        options["headers"] = {name: value}
    return Response.file(request.query["path"], **options)


@app.post("/download")
def download_by_post(request: Request) -> Response:
    return download(request)


@app.get("/download-missing")
def download_missing(request: Request) -> Response:
    return Response.file("/nonexistent/rush-test/file.txt")


@app.get("/gate")
def gate(request: Request) -> str:
    return wait_at_gate_blocking(request)


@app.get("/pid")
def pid(request: Request) -> dict[str, int]:
    return {"pid": os.getpid()}
