"""sse-starlette's example: an ``EventSourceResponse`` over an async generator that stops when
``request.is_disconnected()`` says the client left (sse-starlette also watches for the disconnect
itself, with a second task waiting in ``receive()``)."""

from __future__ import annotations

import asyncio

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.routing import Route


async def numbers(request):
    async def event_generator():
        for number in range(1, 1000):
            if await request.is_disconnected():
                break
            yield {"event": "tick", "id": str(number), "data": str(number)}
            await asyncio.sleep(0.02)

    return EventSourceResponse(event_generator())


app = Starlette(routes=[Route("/numbers", numbers)])
