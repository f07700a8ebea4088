"""Apps written the way their frameworks' docs show, for the tests of what
the response cache keys on (tests/test_cache_keys.py) and its oracle test
(tests/test_cache_oracle.py). The same module is served twice, with
``--cache`` and without, and every answer is deterministic: a function of
the request alone, never of how often a handler ran. Call counts are kept
on the side (``/calls``), so a test can also see that hits happen.

* ``app`` (FastAPI, served with ``--cache "/items/*:ttl=60" ...``):
  ``/items/{item_id}`` (an int: ``/items/abc`` is a 422), ``/echo`` (the
  query, the host and the scheme the app saw), ``/gz`` behind
  ``GZipMiddleware``, ``/cors`` (``Vary: Origin``), ``/lang``
  (``Vary: Accept-Language``), ``/file`` (a Starlette ``FileResponse``, with
  its own Range and conditional handling, sent with pathsend), ``/ranged``
  (a body that answers a byte range itself), ``/weak`` (a weak ``ETag``),
  ``/whoami`` (answers from ``Authorization`` and ``Cookie``),
  ``/slow`` (waits for a file before answering: the stale refresh).
* ``native`` (a rush App): ``/items/{item_id}``, ``/echo`` and ``/lang``
  cached with ``Cache``; ``NATIVE_UNCACHED=1`` in the environment builds
  the same routes without it (the oracle's reference).
* ``flask_app`` (Flask, served with ``--cache``): ``/items/<item_id>``,
  ``/echo`` and ``/lang``.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from pathlib import Path

import flask
import rush
from fastapi import FastAPI, Request, Response
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from starlette.middleware.gzip import GZipMiddleware

calls: Counter[str] = Counter()
FILE = Path(__file__).with_name("static_site.py")

app = FastAPI()
app.add_middleware(GZipMiddleware, minimum_size=100)


@app.get("/items/{item_id}")
def read_item(item_id: int, q: str | None = None) -> dict[str, object]:
    calls["items"] += 1
    return {"item_id": item_id, "q": q}


@app.get("/echo")
def echo(request: Request) -> dict[str, object]:
    calls["echo"] += 1
    return {
        "query": sorted(request.query_params.multi_items()),
        "host": request.headers.get("host"),
        "scheme": request.url.scheme,
        "link": str(request.url_for("echo")),
    }


@app.get("/gz")
def gzipped() -> PlainTextResponse:
    calls["gz"] += 1
    return PlainTextResponse("compressible " * 64)


@app.get("/cors")
def cors(request: Request) -> JSONResponse:
    calls["cors"] += 1
    origin = request.headers.get("origin")
    headers = {"Vary": "Origin"}
    if origin in ("https://a.example", "https://b.example"):
        headers["Access-Control-Allow-Origin"] = origin
    return JSONResponse({"origin": origin}, headers=headers)


@app.get("/lang")
def language(request: Request) -> PlainTextResponse:
    calls["lang"] += 1
    wanted = request.headers.get("accept-language", "en")
    text = "bonjour" if wanted.startswith("fr") else "hello"
    return PlainTextResponse(text, headers={"Vary": "Accept-Language", "Content-Language": wanted[:2]})


@app.get("/file")
def file() -> FileResponse:
    calls["file"] += 1
    return FileResponse(FILE)


@app.get("/ranged")
def ranged(request: Request) -> Response:
    """A resource that answers a single byte range itself, in its body (not
    a file: an answer the cache could store)."""
    calls["ranged"] += 1
    body = b"0123456789abcdef"
    wanted = request.headers.get("range", "")
    if wanted.startswith("bytes=") and "-" in wanted:
        first, _, last = wanted[6:].partition("-")
        start, end = int(first or 0), min(int(last) + 1 if last else len(body), len(body))
        headers = {"Content-Range": f"bytes {start}-{end - 1}/{len(body)}", "Accept-Ranges": "bytes"}
        return Response(body[start:end], status_code=206, headers=headers, media_type="application/octet-stream")
    return Response(body, headers={"Accept-Ranges": "bytes"}, media_type="application/octet-stream")


@app.get("/weak")
def weak() -> Response:
    calls["weak"] += 1
    return Response("weakly tagged", headers={"ETag": 'W/"v1"'}, media_type="text/plain")


@app.get("/whoami")
def whoami(request: Request) -> dict[str, object]:
    calls["whoami"] += 1
    return {"authorization": request.headers.get("authorization"), "cookie": request.headers.get("cookie")}


@app.get("/slow")
def slow(request: Request) -> PlainTextResponse:
    """Answers ``version N`` where N is the number in ``$dir/version``; while
    ``$dir/hold`` exists it waits (up to a guard) before answering, so a
    test can hold a refresh in the handler."""
    calls["slow"] += 1
    directory = Path(request.query_params["dir"])
    deadline = time.monotonic() + 30
    while (directory / "hold").exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    version = (directory / "version").read_text()
    return PlainTextResponse(f"version {version}", headers={"Cache-Control": "max-age=0"})


@app.get("/calls")
def call_counts() -> Response:
    return Response(json.dumps({**calls, "pid": os.getpid()}), media_type="application/json")


native = rush.App()
# The oracle's reference: the same app with no cache at all.
NATIVE_CACHE = None if os.environ.get("NATIVE_UNCACHED") else rush.Cache(ttl=60)


@native.get("/items/{item_id}", cache=NATIVE_CACHE)
def native_item(request: rush.Request, item_id: str) -> dict[str, object]:
    calls["native"] += 1
    return {"item_id": item_id, "q": request.query.get("q")}


@native.get("/echo", cache=NATIVE_CACHE)
def native_echo(request: rush.Request) -> dict[str, object]:
    calls["native_echo"] += 1
    return {"query": sorted(request.query.items()), "host": request.host, "scheme": request.scheme}


@native.get("/lang", cache=NATIVE_CACHE)
def native_language(request: rush.Request) -> rush.Response:
    calls["native_lang"] += 1
    wanted = request.headers.get("accept-language") or "en"
    text = "bonjour" if wanted.startswith("fr") else "hello"
    return rush.Response(text, headers={"Vary": "Accept-Language"}, content_type="text/plain")


@native.get("/calls")
def native_calls(request: rush.Request) -> dict[str, int]:
    return dict(calls)


flask_app = flask.Flask(__name__)


@flask_app.get("/items/<item_id>")
def flask_item(item_id: str) -> dict[str, object]:
    calls["flask"] += 1
    return {"item_id": item_id, "q": flask.request.args.get("q")}


@flask_app.get("/echo")
def flask_echo() -> dict[str, object]:
    calls["flask_echo"] += 1
    return {
        "query": sorted(flask.request.args.items(multi=True)),
        "host": flask.request.host,
        "scheme": flask.request.scheme,
        "link": flask.url_for("flask_echo", _external=True),
    }


@flask_app.get("/lang")
def flask_language() -> flask.Response:
    calls["flask_lang"] += 1
    wanted = flask.request.headers.get("Accept-Language", "en")
    text = "bonjour" if wanted.startswith("fr") else "hello"
    return flask.Response(text, headers={"Vary": "Accept-Language"}, mimetype="text/plain")


@flask_app.get("/calls")
def flask_calls() -> dict[str, int]:
    return dict(calls)
