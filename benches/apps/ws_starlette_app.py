"""The websocket group's endpoints as a Starlette app (``WebSocketRoute``s), served over ASGI.

``/echo`` echoes binary messages with ``iter_bytes``/``send_bytes``; ``/broadcast`` keeps the
accepted ``WebSocket`` objects in one set and sends each message to every member, the sender
included. The load generator sends binary messages only. ``GET /`` answers ``Hello, World!``.
"""

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

MEMBERS: set[WebSocket] = set()


async def index(request) -> PlainTextResponse:
    return PlainTextResponse("Hello, World!")


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    async for data in websocket.iter_bytes():
        await websocket.send_bytes(data)


async def broadcast(websocket: WebSocket) -> None:
    await websocket.accept()
    MEMBERS.add(websocket)
    try:
        async for data in websocket.iter_bytes():
            for member in list(MEMBERS):
                try:
                    await member.send_bytes(data)
                except Exception:  # noqa: BLE001 - a member that left
                    MEMBERS.discard(member)
    finally:
        MEMBERS.discard(websocket)


app = Starlette(routes=[Route("/", index), WebSocketRoute("/echo", echo), WebSocketRoute("/broadcast", broadcast)])
