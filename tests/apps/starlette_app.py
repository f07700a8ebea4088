"""A Starlette app (ASGI) for tests/test_frameworks.py, served with
``rush tests.apps.starlette_app:app``. The endpoints follow the contract of
the framework apps (see tests/apps/flask_app.py): path and query parameters,
a JSON body, urlencoded and multipart forms, a ``StreamingResponse`` from an
async generator that really suspends, ``/startup`` (the lifespan's state), a
custom exception turned into a 418 by an exception handler, and an app-level
500 handler. The lifespan writes ``starlette-startup`` and
``starlette-shutdown`` marker files in ``RUSHTEST_MARKER_DIR`` (if set).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.apps._shared import write_marker_file

FRAMEWORK = "starlette"
MARKER_DIR = os.environ.get("RUSHTEST_MARKER_DIR")


class CustomError(Exception):
    pass


def write_marker(event: str) -> None:
    if MARKER_DIR:
        write_marker_file(MARKER_DIR, f"{FRAMEWORK}-{event}", str(os.getpid()))


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
    write_marker("startup")
    yield {"started": True, "startup_pid": os.getpid()}
    write_marker("shutdown")


async def item(request: Request) -> Response:
    return JSONResponse(
        {
            "item_id": request.path_params["item_id"],
            "q": request.query_params.get("q"),
            "tags": request.query_params.getlist("tag"),
        }
    )


async def json_body(request: Request) -> Response:
    payload = await request.json()
    return JSONResponse({"received": payload, "total": sum(payload["numbers"])})


async def form(request: Request) -> Response:
    async with request.form() as data:
        upload = data.get("upload")
        described = None
        if upload is not None and not isinstance(upload, str):
            content = await upload.read()
            described = {
                "filename": upload.filename,
                "size": len(content),
                "sha256": hashlib.sha256(content).hexdigest(),
            }
        return JSONResponse({"name": data.get("name"), "choices": data.getlist("choice"), "file": described})


async def stream(request: Request) -> Response:
    count = int(request.query_params["n"])

    async def generate() -> AsyncIterator[str]:
        for number in range(count):
            await asyncio.sleep(0)
            yield f"line {number} of {count}\n"

    return StreamingResponse(generate(), media_type="text/plain")


async def startup(request: Request) -> Response:
    return JSONResponse(
        {
            "started": request.state.started,
            "startup_pid": request.state.startup_pid,
            "pid": os.getpid(),
            "framework": FRAMEWORK,
        }
    )


async def custom_error(request: Request) -> Response:
    raise CustomError("raised on purpose")


async def crash(request: Request) -> Response:
    raise RuntimeError("an unhandled error")


async def handle_custom_error(request: Request, error: Exception) -> Response:
    return JSONResponse({"error": "custom", "detail": str(error), "handled_by": FRAMEWORK}, status_code=418)


async def handle_server_error(request: Request, error: Exception) -> Response:
    return JSONResponse({"error": "internal", "handled_by": FRAMEWORK}, status_code=500)


app = Starlette(
    routes=[
        Route("/items/{item_id:int}", item),
        Route("/json", json_body, methods=["POST"]),
        Route("/form", form, methods=["POST"]),
        Route("/stream", stream),
        Route("/startup", startup),
        Route("/custom-error", custom_error),
        Route("/crash", crash),
    ],
    lifespan=lifespan,
    exception_handlers={CustomError: handle_custom_error, 500: handle_server_error},
)
