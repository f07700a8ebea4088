"""The benchmark endpoints as a plain ASGI 3 app (served by uvicorn, and later granian's ASGI mode).

No framework: a framework's routing cost would be measured instead of the
server's. Header blocks are built once at import time; only the query
endpoint and the JSON endpoint do per-request work, as in the other apps.
"""

import json
from urllib.parse import parse_qs

TEXT_HEADERS = [(b"content-type", b"text/plain; charset=utf-8")]
JSON_HEADERS = [(b"content-type", b"application/json")]
REDIRECT_HEADERS = [(b"location", b"/egg"), (b"content-length", b"0")]


async def send_response(send, status: int, headers: list, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        # Servers started with lifespan on need the handshake; acknowledge and return at shutdown.
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    if path == "/":
        await send_response(send, 200, TEXT_HEADERS, b"Hello, World!")
    elif path == "/hello":
        name = parse_qs(scope["query_string"].decode("latin-1")).get("name", ["world"])[0]
        await send_response(send, 200, TEXT_HEADERS, f"Hello, {name}".encode())
    elif path == "/json":
        await send_response(send, 200, JSON_HEADERS, json.dumps({"message": "Hello, World!"}).encode())
    elif path == "/easter":
        await send_response(send, 301, REDIRECT_HEADERS, b"")
    else:
        await send_response(send, 404, TEXT_HEADERS, b"Not Found")
