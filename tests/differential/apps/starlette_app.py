"""A Starlette app as Starlette's docs write one: a lifespan that yields state, ``FileResponse``
(ranges and conditional requests included), ``GZipMiddleware`` and a plain JSON route."""

from __future__ import annotations

import contextlib
from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse
from starlette.routing import Route

STATIC = Path(__file__).resolve().parent / "static"


@contextlib.asynccontextmanager
async def lifespan(app):
    yield {"greeting": "hello from the lifespan"}


async def homepage(request):
    return JSONResponse({"greeting": request.state.greeting, "url": str(request.url)})


async def report(request):
    return FileResponse(STATIC / "report.txt", filename="report.txt")


async def lorem(request):
    return PlainTextResponse("lorem ipsum dolor sit amet " * 200)


app = Starlette(
    routes=[Route("/", homepage), Route("/report", report), Route("/lorem", lorem)],
    middleware=[Middleware(GZipMiddleware, minimum_size=500)],
    lifespan=lifespan,
)
