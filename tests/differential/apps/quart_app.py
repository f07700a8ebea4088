"""A Quart app as Quart's docs write one: JSON in and out, a streamed body from an async
generator, request body streaming, and a WebSocket echo."""

from __future__ import annotations

from quart import Quart, request, websocket

app = Quart(__name__)


@app.route("/")
async def hello():
    return "hello"


@app.post("/echo")
async def echo():
    data = await request.get_json()
    return {"input": data, "extra": True}


@app.route("/stream")
async def stream():
    async def async_generator():
        for number in range(3):
            yield f"part {number}\n".encode()

    return async_generator(), 200, {"X-Something": "value"}


@app.post("/count")
async def count():
    total = 0
    async for data in request.body:
        total += len(data)
    return {"bytes": total}


@app.websocket("/ws")
async def ws():
    while True:
        data = await websocket.receive()
        if data == "bye":
            break
        await websocket.send(f"echo {data}")
