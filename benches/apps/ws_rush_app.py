"""The websocket group's endpoints on rush's native App API (``rush benches.apps.ws_rush_app:app``).

``/echo`` sends every message back as it came (bytes as bytes, text as text); ``/broadcast``
adds the connection to one `rush.Broadcast` group and sends every message it receives to every
member, the sender included (framed once, written natively to each member). ``GET /`` answers
``Hello, World!`` so the runner can tell the server is up.
"""

from rush import App, Broadcast, Request, WebSocket

app = App()
ROOM = Broadcast()


@app.get("/")
def index(request: Request) -> str:
    return "Hello, World!"


@app.websocket("/echo")
async def echo(ws: WebSocket) -> None:
    await ws.accept()
    async for message in ws:
        await ws.send(message)


@app.websocket("/broadcast")
async def broadcast(ws: WebSocket) -> None:
    await ws.accept()
    ROOM.add(ws)
    try:
        async for message in ws:
            await ROOM.send(message)
    finally:
        ROOM.discard(ws)
