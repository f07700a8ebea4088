"""An app with its own 404 and 405 handlers."""

from __future__ import annotations

from rush import App, Request, Response

app = App()


@app.route("/only-get", methods=["GET"])
def only_get(request: Request) -> str:
    return "got it"


@app.errorhandler(404)
def not_found(request: Request) -> str:
    if request.path.startswith("/explode"):
        raise RuntimeError("the 404 handler failed on purpose")
    # A str result keeps the 404 status.
    return f"nothing at {request.path}"


@app.errorhandler(405)
def method_not_allowed(request: Request) -> Response:
    return Response(f"{request.method} is not allowed here", status=405, headers={"X-Handler": "custom"})
