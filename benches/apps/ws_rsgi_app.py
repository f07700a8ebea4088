"""The websocket group's endpoints as an RSGI app (granian's native interface).

``/echo`` sends every message back as it came; ``/broadcast`` keeps every accepted transport in
one set and sends each message to every member, the sender included. ``GET /`` answers
``Hello, World!`` so the runner can tell the server is up.
"""

from granian.rsgi import WebsocketMessageType

TEXT_HEADERS = [("content-type", "text/plain; charset=utf-8")]
MEMBERS: set = set()


async def send(transport, message) -> None:
    if message.kind == WebsocketMessageType.bytes:
        await transport.send_bytes(message.data)
    else:
        await transport.send_str(message.data)


async def app(scope, protocol):
    if scope.proto != "ws":
        protocol.response_str(200, TEXT_HEADERS, "Hello, World!")
        return
    if scope.path not in ("/echo", "/broadcast"):
        protocol.close(403)
        return
    transport = await protocol.accept()
    members = MEMBERS if scope.path == "/broadcast" else None
    if members is not None:
        members.add(transport)
    try:
        while True:
            message = await transport.receive()
            if message.kind == WebsocketMessageType.close:
                return
            if members is None:
                await send(transport, message)
                continue
            for member in list(members):
                try:
                    await send(member, message)
                except Exception:  # noqa: BLE001 - a member that left
                    members.discard(member)
    finally:
        if members is not None:
            members.discard(transport)
        protocol.close()
