"""A sync app (served by the native loop alone) covering the App API: every
return type, path parameters, redirects, errors, and an echo of the request.
``GET /count`` tells how many requests reached a handler in this worker."""

from __future__ import annotations

import hashlib
import os
from typing import Any

from rush import App, Request, Response

from tests.apps._shared import echo, wait_at_gate_blocking

app = App()

# Requests that reached a handler (other than /count) in this worker.
calls = 0

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def counted(handler: Any) -> Any:
    def wrapper(request: Request, **params: str) -> Any:
        global calls
        calls += 1
        return handler(request, **params)

    wrapper.__name__ = handler.__name__
    return wrapper


@app.get("/count")
def count(request: Request) -> dict[str, int]:
    return {"calls": calls}


@app.get("/")
@counted
def index(request: Request) -> str:
    return "Hello, World!"


@app.get("/text")
@counted
def text(request: Request) -> str:
    return "h\u00e9llo \u2713"


@app.get("/bytes")
@counted
def raw_bytes(request: Request) -> bytes:
    return b"\x00\x01\xffbinary"


@app.get("/json")
@counted
def json_dict(request: Request) -> dict[str, Any]:
    return {"message": "h\u00e9llo", "number": 1, "nested": {"list": [1, 2]}}


@app.get("/list")
@counted
def json_list(request: Request) -> list[Any]:
    return [1, "two", None, True]


@app.get("/response")
@counted
def custom_response(request: Request) -> Response:
    return Response("created", status=201, headers={"X-Custom": "yes"}, content_type="text/x-custom")


@app.get("/response-pairs")
@counted
def response_pairs(request: Request) -> Response:
    return Response(b"pairs", headers=[("Set-Cookie", "a=1"), ("Set-Cookie", "b=2"), ("X-Other", "z")])


@app.get("/response-text")
@counted
def response_text(request: Request) -> Response:
    return Response("plain text", status=202)


@app.get("/no-content")
@counted
def no_content(request: Request) -> Response:
    return Response(status=204)


@app.get("/teapot")
@counted
def teapot(request: Request) -> Response:
    return Response(b'{"tea": true}', status=418, content_type="application/json")


@app.get("/big")
@counted
def big(request: Request) -> bytes:
    size = int(request.query.get("size", str(1024 * 1024)))
    return b"x" * size


@app.route("/echo", methods=ALL_METHODS)
@counted
def echo_root(request: Request) -> dict[str, Any]:
    return echo(request)


@app.route("/echo/{*rest}", methods=ALL_METHODS)
@counted
def echo_rest(request: Request, rest: str) -> dict[str, Any]:
    return echo(request, rest=rest)


@app.get("/inspect")
@counted
def inspect(request: Request) -> dict[str, Any]:
    """The mapping API of query and headers, as a handler sees it."""
    query, headers = request.query, request.headers
    return {
        "query_get": query.get("a"),
        "query_get_default": query.get("missing", "fallback"),
        "query_getlist": query.getlist("a"),
        "query_item": query["a"] if "a" in query else None,
        "query_keys": list(query),
        "query_len": len(query),
        "header_get": headers.get("x-multi"),
        "header_getlist": headers.getlist("X-MULTI"),
        "header_item": headers["X-Multi"] if "X-Multi" in headers else None,
        "header_missing": headers.get("x-missing"),
        "has_host": "HOST" in headers,
    }


@app.route("/users/{user_id}", methods=["GET", "PUT"])
@counted
def user(request: Request, user_id: str) -> dict[str, Any]:
    return {"id": user_id, "method": request.method}


@app.get("/users/{user_id}/posts/{post_id}")
@counted
def user_post(request: Request, user_id: str, post_id: str) -> dict[str, Any]:
    return {"user": user_id, "post": post_id}


@app.route("/digest", methods=["POST", "PUT"])
@counted
def digest(request: Request) -> dict[str, Any]:
    body = request.body
    return {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


@app.post("/json-body")
@counted
def json_body(request: Request) -> dict[str, Any]:
    return {"received": request.json()}


@app.get("/raise")
@counted
def raise_error(request: Request) -> str:
    raise RuntimeError("boom from /raise")


@app.get("/bad-return")
@counted
def bad_return(request: Request) -> Any:
    return 42


@app.get("/bad-header")
@counted
def bad_header(request: Request) -> Response:
    return Response("x", headers={"X-Bad": "a\r\nInjected: 1"})


@app.get("/close")
@counted
def close(request: Request) -> Response:
    return Response("bye", headers={"Connection": "close"})


@app.get("/pid")
def pid(request: Request) -> str:
    return str(os.getpid())


@app.get("/gate")
@counted
def gate(request: Request) -> str:
    return wait_at_gate_blocking(request)


app.redirect("/easter", "/egg", status=301)
app.redirect("/old", "/new")


@app.get("/egg")
@counted
def egg(request: Request) -> str:
    return "You found it."
