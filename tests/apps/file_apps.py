"""Files sent by ASGI apps, for tests/test_pathsend.py: Starlette's
``FileResponse`` as its docs show it (it sends ``http.response.pathsend``
when the server lists the extension, and streams the file otherwise), and
a raw app that sends ``pathsend`` for whatever the request asks.

Files come from ``RUSHTEST_FILE_DIR``. Every response's message types are
written to ``RUSHTEST_MARKER_DIR/sent-<name>`` so a test can tell how the
file went out.

* ``/files/{name}``: ``FileResponse`` of that file (GET, HEAD and POST).
* ``/vanished``: a ``FileResponse`` whose file is gone by the time it is
  sent (its ``stat_result`` was taken from another file).
* ``/relative/{name}``: ``FileResponse`` of that file by a path relative to
  the working directory (as apps write ``FileResponse("static/a.pdf")``);
  GET, HEAD and POST.
* ``/relative-vanished``: as ``/vanished``, by a relative path.
* ``/extensions``: the scope's extensions, as JSON.
* ``/raw/{name}``: raw ASGI: a 200 with an ``ETag`` of its own, then
  ``pathsend``, whatever the request's Range or conditions say.
* ``/raw-status/{name}``: raw ASGI: the file under a 404 status.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from tests.apps._shared import write_marker_file

FILE_DIR = Path(os.environ.get("RUSHTEST_FILE_DIR", "."))
MARKER_DIR = os.environ.get("RUSHTEST_MARKER_DIR", "")
RAW_ETAG = b'"raw-tag"'


async def files(request: Request) -> Response:
    return FileResponse(FILE_DIR / request.path_params["name"])


async def vanished(request: Request) -> Response:
    present = FILE_DIR / "small.bin"
    return FileResponse(FILE_DIR / "no-such-file.bin", stat_result=os.stat(present))


async def relative(request: Request) -> Response:
    return FileResponse(os.path.relpath(FILE_DIR / request.path_params["name"]))


async def relative_vanished(request: Request) -> Response:
    present = FILE_DIR / "small.bin"
    return FileResponse(os.path.relpath(FILE_DIR / "no-such-file.bin"), stat_result=os.stat(present))


async def extensions(request: Request) -> Response:
    return JSONResponse(sorted(request.scope.get("extensions", {})))


starlette_app = Starlette(
    routes=[
        Route("/files/{name}", files, methods=["GET", "HEAD", "POST"]),
        Route("/relative/{name}", relative, methods=["GET", "HEAD", "POST"]),
        Route("/vanished", vanished),
        Route("/relative-vanished", relative_vanished),
        Route("/extensions", extensions),
    ]
)


async def raw_pathsend(scope: dict[str, Any], send: Any, status: int) -> None:
    path = FILE_DIR / scope["path"].rsplit("/", 1)[1]
    headers = [(b"content-type", b"application/octet-stream"), (b"etag", RAW_ETAG), (b"x-app", b"raw")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.pathsend", "path": str(path)})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        await starlette_app(scope, receive, send)
        return
    sent: list[str] = []

    async def recording_send(message: dict[str, Any]) -> None:
        sent.append(message["type"])
        await send(message)

    if scope["path"].startswith("/raw/"):
        await raw_pathsend(scope, recording_send, 200)
    elif scope["path"].startswith("/raw-status/"):
        await raw_pathsend(scope, recording_send, 404)
    else:
        await starlette_app(scope, receive, recording_send)
    if MARKER_DIR:
        name = scope["path"].strip("/").replace("/", "-")
        write_marker_file(MARKER_DIR, f"sent-{scope['method']}-{name}", ",".join(sent))
