"""A FastAPI app as FastAPI's tutorial writes one: path and query parameters, a Pydantic body,
``UploadFile``, ``BackgroundTasks``, ``StreamingResponse`` and server-sent events that stop when
``request.is_disconnected()`` says the client left."""

from __future__ import annotations

import asyncio
import hashlib

from fastapi import BackgroundTasks, FastAPI, Request, UploadFile
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

app = FastAPI()
notifications: list[str] = []


class Item(BaseModel):
    name: str
    description: str | None = None
    price: float
    tax: float | None = None
    tags: list[str] = []


@app.get("/items/{item_id}")
async def read_item(item_id: int, q: str | None = None, short: bool = False):
    item = {"item_id": item_id}
    if q:
        item["q"] = q
    if not short:
        item["description"] = "This is an amazing item that has a long description"
    return item


@app.post("/items/")
async def create_item(item: Item):
    item_dict = item.model_dump()
    if item.tax is not None:
        item_dict["price_with_tax"] = item.price + item.tax
    return item_dict


@app.post("/uploadfile/")
async def create_upload_file(file: UploadFile):
    content = await file.read()
    return {
        "filename": file.filename,
        "content_type": file.content_type,
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }


def write_notification(email: str, message: str = ""):
    notifications.append(f"notification for {email}: {message}")


@app.post("/send-notification/{email}")
async def send_notification(email: str, background_tasks: BackgroundTasks):
    background_tasks.add_task(write_notification, email, message="some notification")
    return {"message": "Notification sent in the background"}


mail_server_ready: asyncio.Event | None = None


async def send_email(email: str):
    """An async task that waits on the outside world (here: until /mail-server-ready is called)."""
    global mail_server_ready
    mail_server_ready = mail_server_ready or asyncio.Event()
    await mail_server_ready.wait()
    notifications.append(f"email to {email}")


@app.post("/send-email/{email}")
async def send_email_later(email: str, background_tasks: BackgroundTasks):
    background_tasks.add_task(send_email, email)
    return {"message": "Email queued"}


@app.post("/mail-server-ready")
async def make_mail_server_ready():
    global mail_server_ready
    mail_server_ready = mail_server_ready or asyncio.Event()
    mail_server_ready.set()
    return {"ready": True}


@app.get("/notifications")
async def list_notifications():
    return notifications


async def fake_video_streamer(size: int):
    for number in range(size // 65536):
        yield bytes([number % 256]) * 65536
        await asyncio.sleep(0)


@app.get("/video")
async def video(size: int = 1 << 20):
    return StreamingResponse(fake_video_streamer(size), media_type="video/mp4")


@app.get("/events")
async def events(request: Request):
    async def event_stream():
        number = 0
        while True:
            if await request.is_disconnected():
                break
            yield f"data: {number}\n\n"
            number += 1
            await asyncio.sleep(0.05)

    return StreamingResponse(event_stream(), media_type="text/event-stream")


@app.get("/countdown")
async def countdown(request: Request):
    async def event_stream():
        try:
            for number in (3, 2, 1):
                yield f"data: {number}\n\n"
                await asyncio.sleep(0.01)
        finally:
            if await request.is_disconnected():
                print("client left early")

    return StreamingResponse(event_stream(), media_type="text/event-stream")
