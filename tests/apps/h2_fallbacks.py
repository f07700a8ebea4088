"""A rush App whose answers are replaced after they were rendered, for the
HTTP/2 tests of taking a response back (tests/test_http2_conformance.py).

``RUSHTEST_STATIC_DIR`` is mounted at ``/static``; the app has its own 404
and 500 pages. A file the mount does not have gets the static 404 first,
which the app's 404 page replaces; ``/static/explode...`` makes that 404
page raise, so the app's 500 page replaces it in turn. ``/bad-value``
returns a value the server cannot send (a render failure: the 500 page),
``/hello`` plain text, ``POST /echo`` the length of the body it got.
"""

from __future__ import annotations

import os

from rush import App, Request, Response

app = App()
app.static("/static", os.environ["RUSHTEST_STATIC_DIR"])


@app.get("/hello")
def hello(request: Request) -> str:
    return "hello"


@app.post("/echo")
def echo(request: Request) -> dict[str, int]:
    return {"length": len(request.body)}


@app.get("/bad-value")
def bad_value(request: Request) -> object:
    return object()


@app.errorhandler(404)
def not_found(request: Request) -> Response:
    if request.path.startswith("/static/explode"):
        raise RuntimeError("the 404 page failed on purpose")
    return Response(f"the app's own 404 for {request.path}", status=404, headers={"X-Page": "app-404"})


@app.errorhandler(500)
def server_error(request: Request) -> Response:
    return Response(f"the app's own 500 for {request.path}", status=500, headers={"X-Page": "app-500"})
