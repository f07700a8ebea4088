"""Apps whose responses test the server's checks on what apps send
(tests/test_responses.py): statuses, the server's own header fields, and
what a WSGI app is told about a chunked request body.

* ``app`` (rush App): ``/status/{code}`` answers ``Response(status=code)``;
  ``/set-status/{code}`` sets ``response.status`` after building it;
  ``/date`` sets its own ``Date``; ``/only-post`` has a 405 handler that
  sets its own ``Allow``.
* ``wsgi_app``: ``/status?line=...`` calls ``start_response(line, ...)``;
  ``/date`` sets its own ``Date``; ``/body`` answers with ``CONTENT_LENGTH``
  and exactly that many bytes read from ``wsgi.input``.
* ``asgi_app``: ``/status/{code}`` and ``/date``, as above.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

from rush import App, Request, Response

APP_DATE = "Mon, 01 Jan 2024 00:00:00 GMT"

app = App()


@app.get("/status/{code}")
def status(request: Request, code: str) -> Response:
    return Response("status", status=int(code))


@app.get("/set-status/{code}")
def set_status(request: Request, code: str) -> Response:
    response = Response("status")
    response.status = int(code)
    return response


@app.get("/date")
def date(request: Request) -> Response:
    return Response("dated", headers={"Date": APP_DATE})


@app.post("/only-post")
def only_post(request: Request) -> str:
    return "posted"


@app.errorhandler(405)
def not_allowed(request: Request) -> Response:
    return Response("use POST", status=405, headers={"Allow": "POST"})


def wsgi_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    path = environ["PATH_INFO"]
    if path == "/status":
        line = parse_qs(environ["QUERY_STRING"])["line"][0]
        start_response(line, [("Content-Type", "text/plain")])
        return [b"status"]
    if path == "/date":
        start_response("200 OK", [("Date", APP_DATE)])
        return [b"dated"]
    if path == "/body":
        length = environ.get("CONTENT_LENGTH")
        body = environ["wsgi.input"].read(int(length)) if length else b""
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps({"content_length": length, "body": body.decode()}).encode()]
    start_response("404 Not Found", [])
    return [b""]


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    if scope["path"].startswith("/status/"):
        await send({"type": "http.response.start", "status": int(scope["path"].rsplit("/", 1)[1])})
        await send({"type": "http.response.body", "body": b"status"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"date", APP_DATE.encode())]})
    await send({"type": "http.response.body", "body": b"dated"})
