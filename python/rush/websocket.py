"""WebSockets in a rush `App`: the ``@app.websocket`` route and its errors.

A handler is ``async def handler(ws, **path_params)``. ``ws`` is the native
`rush._rush.WebSocket` (framing, queues and backpressure are in Rust)::

    @app.websocket("/ws/{room}")
    async def chat(ws, room):
        await ws.accept()
        async for message in ws:          # str or bytes, until the peer closes
            await ws.send(message)

`WebSocketRoute` is what the App registers for the path: an upgrade request
reaches ``websocket_session`` (the loop looks for that method), a plain GET
gets ``426 Upgrade Required``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rush._rush import Request, Response, WebSocket


class WebSocketDisconnect(ConnectionResetError):
    """The connection is over: ``ws.receive()`` raises it once the peer
    closed (``code`` is its close code, 1005 if it gave none, 1006 if the
    connection dropped), and so does ``ws.send()`` afterwards. An
    `OSError`, as ASGI asks of a send on a closed connection; one a handler
    lets propagate is not logged as an error."""

    def __init__(self, code: int = 1000, reason: str = "") -> None:
        detail = f" ({reason})" if reason else ""
        super().__init__(f"the WebSocket closed with code {code}{detail}")
        self.code = code
        self.reason = reason


class WebSocketRoute:
    """The endpoint `App.websocket` registers for a path."""

    def __init__(self, handler: Callable[..., Awaitable[Any]]) -> None:
        self.handler = handler

    async def __call__(self, request: Request, **params: Any) -> Response:
        # A GET without the upgrade: say what this endpoint speaks.
        return Response(
            "this endpoint speaks WebSocket\n",
            status=426,
            headers={"Upgrade": "websocket", "Sec-WebSocket-Version": "13"},
        )

    def websocket_session(self, ws: WebSocket, params: dict[str, str] | None) -> Awaitable[Any]:
        """Called by the loop for an upgrade request: the handler's coroutine."""
        return self.handler(ws, **params) if params else self.handler(ws)
