"""A raw ASGI app whose lifespan shutdown goes wrong in the way ``SHUTDOWN_MODE`` names, for
tests/differential/test_diff_shutdown.py: ``raise`` (the app raises on ``lifespan.shutdown``),
``failed`` (it answers ``lifespan.shutdown.failed``) or ``hang`` (it never answers; its ``finally``
block writes the file ``SHUTDOWN_MARKER`` names, if it gets to run)."""

from __future__ import annotations

import asyncio
import os


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                mode = os.environ["SHUTDOWN_MODE"]
                if mode == "raise":
                    raise RuntimeError("shutdown broke")
                if mode == "failed":
                    await send({"type": "lifespan.shutdown.failed", "message": "could not flush"})
                    return
                try:
                    await asyncio.Event().wait()
                finally:
                    # Whether the server ended the hang by cancelling (cleanup runs) or killed the process.
                    with open(os.environ["SHUTDOWN_MARKER"], "w") as marker:
                        marker.write("finally ran")
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})
