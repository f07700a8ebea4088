"""An app with its own 404, 405 and 500 handlers (and an async route, so it
is served on asyncio)."""

from __future__ import annotations

import asyncio

from rush import App, Request, Response

app = App()


@app.route("/only-get", methods=["GET"])
def only_get(request: Request) -> str:
    return "got it"


@app.get("/raise")
def raise_error(request: Request) -> str:
    raise RuntimeError("a handler failed, for the 500 handler")


@app.get("/raise-async")
async def raise_async(request: Request) -> str:
    await asyncio.sleep(0.001)
    raise RuntimeError("an async handler failed, for the 500 handler")


@app.get("/raise-in-500")
def raise_in_500(request: Request) -> str:
    raise RuntimeError("the first failure")


@app.errorhandler(404)
def not_found(request: Request) -> str:
    if request.path.startswith("/explode"):
        raise RuntimeError("the 404 handler failed on purpose")
    # A str result keeps the 404 status.
    return f"nothing at {request.path}"


@app.errorhandler(405)
def method_not_allowed(request: Request) -> Response:
    return Response(f"{request.method} is not allowed here", status=405, headers={"X-Handler": "custom"})


@app.errorhandler(500)
def server_error(request: Request) -> str:
    if request.path == "/raise-in-500":
        raise RuntimeError("the 500 handler failed too")
    return f"custom 500 for {request.path}"
