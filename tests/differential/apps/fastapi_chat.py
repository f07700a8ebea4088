"""The WebSocket chat of FastAPI's docs ("Handling disconnections and multiple clients"): a
connection manager that broadcasts each message and says when a client left."""

from __future__ import annotations

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

app = FastAPI()


class ConnectionManager:
    def __init__(self):
        self.active_connections: list[WebSocket] = []

    async def connect(self, websocket: WebSocket):
        await websocket.accept()
        self.active_connections.append(websocket)

    def disconnect(self, websocket: WebSocket):
        self.active_connections.remove(websocket)

    async def send_personal_message(self, message: str, websocket: WebSocket):
        await websocket.send_text(message)

    async def broadcast(self, message: str):
        for connection in self.active_connections:
            await connection.send_text(message)


manager = ConnectionManager()


@app.websocket("/ws/{client_id}")
async def websocket_endpoint(websocket: WebSocket, client_id: int):
    await manager.connect(websocket)
    try:
        while True:
            data = await websocket.receive_text()
            await manager.send_personal_message(f"You wrote: {data}", websocket)
            await manager.broadcast(f"Client #{client_id} says: {data}")
    except WebSocketDisconnect:
        manager.disconnect(websocket)
        await manager.broadcast(f"Client #{client_id} left the chat")


@app.websocket("/bytes")
async def bytes_endpoint(websocket: WebSocket):
    await websocket.accept(subprotocol="echo" if "echo" in websocket.scope["subprotocols"] else None)
    message = await websocket.receive_bytes()
    await websocket.send_bytes(message[::-1])
    await websocket.close(code=4000, reason="done")


@app.websocket("/private")
async def private(websocket: WebSocket, token: str | None = None):
    if token != "let-me-in":
        # Refused before the handshake completes: the client gets an HTTP answer.
        await websocket.close(code=1008)
        return
    await websocket.accept()
    await websocket.send_json({"welcome": True})
    await websocket.close()
