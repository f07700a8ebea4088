"""What an app behind a reverse proxy computes from a request, answered as JSON, for
test_diff_front.py: the client, the scheme, its own URL and the URLs it builds.

* ``app`` (ASGI, Starlette): ``/where`` answers ``request.url``, ``request.client`` (its port
  included: the recorder masks the scope's), ``url_for`` of a route, ``base_url`` and the
  scope's ``scheme`` and ``server``; ``/ws`` does the same over a WebSocket (``websocket.url``)
  and closes; ``/folder`` exists only without its trailing slash, so ``/folder/`` redirects
  (the ``Location`` is built from the request's URL).
* ``proxied``: ``app``, wrapped under hypercorn in hypercorn's own ``ProxyFixMiddleware`` for
  one proxy (hypercorn has no proxy options of its own): the reference for rush's
  ``--forwarded-host`` on the ASGI side (uvicorn reads no X-Forwarded-Host);
  ``proxied_rfc7239`` the same in its RFC 7239 ``Forwarded`` mode, for ``--proxy-headers forwarded``.
* ``wsgi`` (Flask): ``/where`` answers ``request.url``, ``url_for(..., _external=True)``,
  ``is_secure``, ``remote_addr``, ``host`` and ``SERVER_NAME``/``SERVER_PORT``; ``/go``
  redirects to ``/where``. Under gunicorn it is wrapped in werkzeug's ``ProxyFix`` for one
  proxy (``x_for``, ``x_proto``, ``x_host``, ``x_port``), as Flask's "Tell Flask it is behind
  a proxy" page writes it, since gunicorn itself rewrites only the scheme: that pair is the
  reference for what rush does natively.
"""

from __future__ import annotations

import sys

from flask import Flask, redirect, request, url_for
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket
from werkzeug.middleware.proxy_fix import ProxyFix


def _asgi_view(connection: Request | WebSocket) -> dict:
    client = connection.client
    return {
        "url": str(connection.url),
        "base_url": str(connection.base_url),
        "client": [client.host, client.port] if client else None,
        "scheme": connection.scope["scheme"],
        "url_for": str(connection.url_for("where")),
        "host": connection.headers.get("host"),
    }


async def where(request: Request) -> JSONResponse:
    return JSONResponse(_asgi_view(request))


async def folder(request: Request) -> JSONResponse:
    return JSONResponse({"folder": str(request.url)})


async def websocket_where(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_json(_asgi_view(websocket))
    await websocket.close()


app = Starlette(
    routes=[
        Route("/where", where, name="where"),
        Route("/folder", folder),
        WebSocketRoute("/ws", websocket_where),
    ]
)

# The process is hypercorn's (`--workers 0`: the test's own process serves), or rush's.
if sys.argv[0].endswith("hypercorn"):
    from hypercorn.middleware import ProxyFixMiddleware

    proxied = ProxyFixMiddleware(app, mode="legacy", trusted_hops=1)
    proxied_rfc7239 = ProxyFixMiddleware(app, mode="modern", trusted_hops=1)
else:
    proxied = proxied_rfc7239 = app


flask_app = Flask(__name__)


@flask_app.get("/where")
def flask_where():
    return {
        "url": request.url,
        "url_for": url_for("flask_where", _external=True),
        "is_secure": request.is_secure,
        "remote_addr": request.remote_addr,
        "host": request.host,
        "server": [request.environ.get("SERVER_NAME"), request.environ.get("SERVER_PORT")],
    }


@flask_app.get("/go")
def flask_go():
    return redirect(url_for("flask_where", _external=True))


_fixed = ProxyFix(flask_app.wsgi_app, x_for=1, x_proto=1, x_host=1, x_port=1)


def wsgi(environ, start_response):
    if environ.get("SERVER_SOFTWARE", "").startswith("gunicorn"):
        return _fixed(environ, start_response)
    return flask_app.wsgi_app(environ, start_response)
