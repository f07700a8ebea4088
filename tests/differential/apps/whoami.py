"""Answers with the server the app was told it was reached through (test_diff_binds.py):
WSGI's ``SERVER_NAME`` and ``SERVER_PORT``, ASGI's ``server``, as JSON."""

from __future__ import annotations

import json


def wsgi(environ, start_response):
    body = json.dumps({"name": environ["SERVER_NAME"], "port": environ["SERVER_PORT"]}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


async def app(scope, receive, send):
    body = json.dumps({"server": scope.get("server")}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
