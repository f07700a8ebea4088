"""The websocket group's endpoints as a plain ASGI 3 app (rush, uvicorn, granian).

No framework: ``/echo`` sends every ``websocket.receive`` back as it came (bytes as bytes, text
as text); ``/broadcast`` keeps every accepted connection's ``send`` in one set and sends each
message it receives to every member, the sender included, one ``send`` per member (ASGI has no
group send); a member whose connection is gone is dropped. ``GET /`` answers ``Hello, World!``
so the runner can tell the server is up; any other WebSocket path is refused (403).
"""

TEXT_HEADERS = [(b"content-type", b"text/plain; charset=utf-8")]
MEMBERS: set = set()


def outgoing(message: dict) -> dict:
    """The ``websocket.send`` event carrying what ``message`` (a ``websocket.receive``) carried."""
    data = message.get("bytes")
    if data is not None:
        return {"type": "websocket.send", "bytes": data}
    return {"type": "websocket.send", "text": message.get("text")}


async def echo(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] != "websocket.receive":
            return
        await send(outgoing(message))


async def broadcast(receive, send) -> None:
    MEMBERS.add(send)
    try:
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            event = outgoing(message)
            for member in list(MEMBERS):
                try:
                    await member(event)
                except Exception:  # noqa: BLE001 - a member that left (servers raise different errors)
                    MEMBERS.discard(member)
    finally:
        MEMBERS.discard(send)


async def app(scope, receive, send):
    kind = scope["type"]
    if kind == "websocket":
        if (await receive())["type"] != "websocket.connect":
            return
        if scope["path"] not in ("/echo", "/broadcast"):
            await send({"type": "websocket.close", "code": 1008})
            return
        await send({"type": "websocket.accept"})
        await (echo if scope["path"] == "/echo" else broadcast)(receive, send)
    elif kind == "http":
        await send({"type": "http.response.start", "status": 200, "headers": TEXT_HEADERS})
        await send({"type": "http.response.body", "body": b"Hello, World!"})
    elif kind == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
