"""A FastAPI app (ASGI) for tests/test_frameworks.py, served with
``rush tests.apps.fastapi_app:app``. The endpoints follow the contract of the
framework apps (see tests/apps/flask_app.py): typed path and query parameters
(``/items`` is a sync endpoint, so FastAPI runs it on its thread pool), a JSON
body validated by a Pydantic model (422 when invalid), ``Form``/``File``
parameters, a ``StreamingResponse``, ``/startup`` (the lifespan's state), a
custom exception turned into a 418 by ``exception_handler``, and an app-level
500 handler. The lifespan writes ``fastapi-startup`` and ``fastapi-shutdown``
marker files in ``RUSHTEST_MARKER_DIR`` (if set).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import threading
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import FastAPI, File, Form, Query, Request, UploadFile
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel

from tests.apps._shared import write_marker_file

FRAMEWORK = "fastapi"
MARKER_DIR = os.environ.get("RUSHTEST_MARKER_DIR")


class CustomError(Exception):
    pass


class Payload(BaseModel):
    name: str
    numbers: list[int]


def write_marker(event: str) -> None:
    if MARKER_DIR:
        write_marker_file(MARKER_DIR, f"{FRAMEWORK}-{event}", str(os.getpid()))


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    write_marker("startup")
    yield {"started": True, "startup_pid": os.getpid()}
    write_marker("shutdown")


app = FastAPI(lifespan=lifespan)


@app.get("/items/{item_id}")
def item(item_id: int, q: str | None = None, tag: Annotated[list[str] | None, Query()] = None) -> dict[str, Any]:
    # A sync endpoint: FastAPI runs it on its thread pool.
    return {"item_id": item_id, "q": q, "tags": tag or [], "thread": threading.current_thread().name}


@app.post("/json")
async def json_body(payload: Payload) -> dict[str, Any]:
    return {"received": payload.model_dump(), "total": sum(payload.numbers)}


@app.post("/form")
async def form(
    name: Annotated[str, Form()],
    choice: Annotated[list[str] | None, Form()] = None,
    upload: Annotated[UploadFile | None, File()] = None,
) -> dict[str, Any]:
    described = None
    if upload is not None:
        content = await upload.read()
        described = {"filename": upload.filename, "size": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    return {"name": name, "choices": choice or [], "file": described}


@app.get("/stream")
async def stream(n: int) -> StreamingResponse:
    async def generate() -> AsyncIterator[str]:
        for number in range(n):
            await asyncio.sleep(0)
            yield f"line {number} of {n}\n"

    return StreamingResponse(generate(), media_type="text/plain")


@app.get("/startup")
async def startup(request: Request) -> dict[str, Any]:
    return {
        "started": request.state.started,
        "startup_pid": request.state.startup_pid,
        "pid": os.getpid(),
        "framework": FRAMEWORK,
    }


@app.get("/custom-error")
async def custom_error() -> None:
    raise CustomError("raised on purpose")


@app.get("/crash")
async def crash() -> None:
    raise RuntimeError("an unhandled error")


@app.exception_handler(CustomError)
async def handle_custom_error(request: Request, error: CustomError) -> JSONResponse:
    return JSONResponse({"error": "custom", "detail": str(error), "handled_by": FRAMEWORK}, status_code=418)


@app.exception_handler(500)
async def handle_server_error(request: Request, error: Exception) -> JSONResponse:
    return JSONResponse({"error": "internal", "handled_by": FRAMEWORK}, status_code=500)
