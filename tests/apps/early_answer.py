"""An ASGI app that answers at once and never reads the request body, as
httpx's own test server does (tests/test_early_answer.py): whatever the
client still sends after the answer is the server's to deal with."""

from __future__ import annotations

from typing import Any


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"Hello, world!"})
