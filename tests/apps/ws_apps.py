"""WebSocket apps for tests/test_websocket*.py, one per interface, all with
the same endpoints so the tests run the same checks against each:

* ``/echo``: accepts (choosing ``chat`` if offered), echoes text and bytes
  (in the raw ASGI app, so does every path not named below);
  the text ``close:CODE:REASON`` makes the server close with that code.
* ``/deny``: closes before accepting (HTTP 403).
* ``/state``: (HTTP GET) what the apps recorded, as JSON: the disconnect
  codes they received (``disconnects``), the flood's progress, and (the raw
  ASGI app) how often it was called for a WebSocket (``websocket_calls``).

The raw ASGI app (``asgi_app``) has more: ``/http-deny`` (the
``websocket.http.response`` extension), ``/raise-before`` (500),
``/raise-after`` (close 1011), ``/server-close`` (closes with 4000 and
records the disconnect it then receives), ``/flood`` (sends 1 MiB messages
to a client that does not read, and records after how many a send waited),
``/send-after-close`` (records what a send after the disconnect raised),
``/trickle`` (sends 16 KiB messages to a client that does not read, and
records how many bytes it had sent when a send first waited) and
``/scope`` (sends its scope back as JSON). The rush App has
``/rooms/{room}`` (a `rush.Broadcast` group) and ``/held`` (takes no
message until ``GET /release``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import rush
from fastapi import FastAPI
from fastapi import WebSocket as FastAPIWebSocket
from fastapi import WebSocketDisconnect as FastAPIDisconnect
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket as StarletteWebSocket
from starlette.websockets import WebSocketDisconnect as StarletteDisconnect

STATE: dict[str, Any] = {
    "disconnects": [],
    "flood_blocked_after": None,
    "flood_done": False,
    "late_send": None,
    "websocket_calls": 0,
    "trickle_blocked_at": None,
    "trickle_sent": 0,
    "trickle_done": False,
}
FLOOD_CHUNK = 1024 * 1024
FLOOD_MESSAGES = 64
TRICKLE_CHUNK = 16 * 1024
TRICKLE_MESSAGES = 256


def _close_request(text: str) -> tuple[int, str] | None:
    if text.startswith("close:"):
        _, code, reason = text.split(":", 2)
        return int(code), reason
    return None


def _error_kind(error: BaseException) -> str:
    return "ConnectionResetError" if isinstance(error, ConnectionResetError) else type(error).__name__


# --- raw ASGI ---------------------------------------------------------------


async def _http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = json.dumps(STATE).encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


async def _echo(receive: Any, send: Any, scope: dict[str, Any]) -> None:
    assert (await receive())["type"] == "websocket.connect"
    subprotocol = "chat" if "chat" in scope["subprotocols"] else None
    await send({"type": "websocket.accept", "subprotocol": subprotocol, "headers": [(b"x-echo", b"yes")]})
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            STATE["disconnects"].append(message["code"])
            return
        text = message.get("text")
        if text is not None and (close := _close_request(text)):
            await send({"type": "websocket.close", "code": close[0], "reason": close[1]})
            continue
        if text is not None:
            await send({"type": "websocket.send", "text": text})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})


async def _send_noting_a_wait(send: Any, data: bytes, key: str, value: int) -> None:
    """Sends one binary message. If the send has not finished after one pass
    of the loop (the server holds it back) and ``STATE[key]`` is still None,
    sets it to ``value`` then, while the send is held."""
    pending = asyncio.ensure_future(send({"type": "websocket.send", "bytes": data}))
    await asyncio.sleep(0)
    if not pending.done() and STATE[key] is None:
        STATE[key] = value
    await pending


async def _close_and_wait(receive: Any, send: Any) -> None:
    await send({"type": "websocket.close", "code": 1000})
    while (await receive())["type"] != "websocket.disconnect":
        pass


async def _flood(receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "websocket.accept"})
    chunk = b"x" * FLOOD_CHUNK
    for number in range(1, FLOOD_MESSAGES + 1):
        await _send_noting_a_wait(send, chunk, "flood_blocked_after", number)
    STATE["flood_done"] = True
    await _close_and_wait(receive, send)


async def _trickle(receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "websocket.accept"})
    chunk = b"t" * TRICKLE_CHUNK
    for number in range(1, TRICKLE_MESSAGES + 1):
        await _send_noting_a_wait(send, chunk, "trickle_blocked_at", number * TRICKLE_CHUNK)
        STATE["trickle_sent"] = number * TRICKLE_CHUNK
    STATE["trickle_done"] = True
    await _close_and_wait(receive, send)


async def asgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    if scope["type"] == "http":
        return await _http(scope, receive, send)
    STATE["websocket_calls"] += 1
    path = scope["path"]
    if path in ("/echo", "/ws/echo"):
        return await _echo(receive, send, scope)
    if path == "/deny":
        await receive()
        await send({"type": "websocket.close"})
        return
    if path == "/http-deny":
        await receive()
        await send({"type": "websocket.http.response.start", "status": 401, "headers": [(b"x-why", b"no")]})
        await send({"type": "websocket.http.response.body", "body": b"not you", "more_body": True})
        await send({"type": "websocket.http.response.body", "body": b"!"})
        return
    if path == "/raise-before":
        await receive()
        raise RuntimeError("failing before accept, on purpose")
    if path == "/raise-after":
        await receive()
        await send({"type": "websocket.accept"})
        await receive()
        raise RuntimeError("failing after accept, on purpose")
    if path == "/server-close":
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": 4000, "reason": "done"})
        message = await receive()
        STATE["disconnects"].append(message["code"])
        try:
            await receive()
        except OSError as error:
            STATE["late_send"] = f"receive: {_error_kind(error)}"
        return
    if path == "/send-after-close":
        await receive()
        await send({"type": "websocket.accept"})
        message = await receive()
        STATE["disconnects"].append(message["code"])
        try:
            await send({"type": "websocket.send", "text": "too late"})
        except OSError as error:
            STATE["late_send"] = _error_kind(error)
        await send({"type": "websocket.send", "text": "raised and not caught"})
    if path == "/hang":
        # Never answers the handshake: the server's accept deadline ends it.
        await receive()
        message = await receive()
        STATE["disconnects"].append(message["code"])
        return
    if path == "/flood":
        return await _flood(receive, send)
    if path == "/trickle":
        return await _trickle(receive, send)
    if path == "/scope":
        await receive()
        await send({"type": "websocket.accept"})
        shown = {
            key: value
            for key, value in scope.items()
            if key in ("type", "scheme", "path", "query_string", "subprotocols", "http_version", "extensions", "client")
        }
        shown["query_string"] = shown["query_string"].decode()
        shown["headers"] = [[name.decode(), value.decode()] for name, value in scope["headers"]]
        shown["spec_version"] = scope["asgi"]["spec_version"]
        await send({"type": "websocket.send", "text": json.dumps(shown)})
        await send({"type": "websocket.close"})
        await receive()
        return
    # Any other path echoes (the Autobahn fuzzing client's target).
    return await _echo(receive, send, scope)


# --- Starlette ----------------------------------------------------------------


async def _starlette_echo(websocket: StarletteWebSocket) -> None:
    subprotocol = "chat" if "chat" in websocket.scope["subprotocols"] else None
    await websocket.accept(subprotocol=subprotocol)
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                STATE["disconnects"].append(message["code"])
                return
            text = message.get("text")
            if text is not None and (close := _close_request(text)):
                await websocket.close(close[0], close[1])
            elif text is not None:
                await websocket.send_text(text)
            else:
                await websocket.send_bytes(message["bytes"])
    except StarletteDisconnect as disconnect:
        STATE["disconnects"].append(disconnect.code)


async def _starlette_deny(websocket: StarletteWebSocket) -> None:
    await websocket.close()


async def _state(request: Any) -> JSONResponse:
    return JSONResponse(STATE)


starlette_app = Starlette(
    routes=[
        WebSocketRoute("/echo", _starlette_echo),
        WebSocketRoute("/deny", _starlette_deny),
        Route("/state", _state),
    ]
)


# --- FastAPI ------------------------------------------------------------------

fastapi_app = FastAPI()


@fastapi_app.websocket("/echo")
async def fastapi_echo(websocket: FastAPIWebSocket) -> None:
    subprotocol = "chat" if "chat" in websocket.scope["subprotocols"] else None
    await websocket.accept(subprotocol=subprotocol)
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                STATE["disconnects"].append(message["code"])
                return
            text = message.get("text")
            if text is not None and (close := _close_request(text)):
                await websocket.close(close[0], close[1])
            elif text is not None:
                await websocket.send_text(text)
            else:
                await websocket.send_bytes(message["bytes"])
    except FastAPIDisconnect as disconnect:
        STATE["disconnects"].append(disconnect.code)


@fastapi_app.websocket("/deny")
async def fastapi_deny(websocket: FastAPIWebSocket) -> None:
    await websocket.close()


@fastapi_app.get("/state")
async def fastapi_state() -> dict[str, Any]:
    return STATE


# --- rush App -------------------------------------------------------------------

rush_app = rush.App()
ROOMS: dict[str, rush.Broadcast] = {}


@rush_app.websocket("/echo")
async def rush_echo(ws: rush.WebSocket) -> None:
    await ws.accept(subprotocol="chat" if "chat" in ws.subprotocols else None)
    try:
        async for message in ws:
            if isinstance(message, str) and (close := _close_request(message)):
                await ws.close(*close)
                continue
            await ws.send(message)
        await ws.receive()
    except rush.WebSocketDisconnect as disconnect:
        STATE["disconnects"].append(disconnect.code)


@rush_app.websocket("/request")
async def rush_request(ws: rush.WebSocket) -> None:
    """Sends back what the handler sees of the request, as JSON."""
    await ws.accept()
    fields = {name.lower(): value for name, value in ws.headers}
    await ws.send(json.dumps({"path": ws.path, "query": ws.query_string, "origin": fields.get("origin")}))
    await ws.close()


@rush_app.websocket("/deny")
async def rush_deny(ws: rush.WebSocket) -> None:
    await ws.close()


@rush_app.websocket("/rooms/{room}")
async def rush_room(ws: rush.WebSocket, room: str) -> None:
    """Joins ``room``; every text received is broadcast to the room as
    ``room:text``; ``count`` answers how many members the room has."""
    await ws.accept()
    group = ROOMS.setdefault(room, rush.Broadcast())
    group.add(ws)
    try:
        async for message in ws:
            if message == "count":
                await ws.send(str(len(group)))
            else:
                await group.send(f"{room}:{message}")
    finally:
        group.discard(ws)


HELD_RELEASE = asyncio.Event()


@rush_app.websocket("/held")
async def rush_held(ws: rush.WebSocket) -> None:
    """Takes no message until GET /release; then counts them up to ``end``."""
    await ws.accept()
    await HELD_RELEASE.wait()
    count = 0
    async for message in ws:
        if message == "end":
            STATE["held_count"] = count
            await ws.close()
        else:
            count += 1


@rush_app.get("/release")
async def rush_release(request: rush.Request) -> str:
    HELD_RELEASE.set()
    return "released"


@rush_app.get("/state")
def rush_state(request: rush.Request) -> dict[str, Any]:
    return STATE
