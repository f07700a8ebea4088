"""A FastAPI app as people write them: ``GET /json`` returns a dict, FastAPI serialises it.

Served unchanged by rush (ASGI detected), granian's ASGI mode and uvicorn. The
handler is ``async def`` as FastAPI recommends for code that does not block:
a plain ``def`` would go through FastAPI's thread pool on every request.
"""

from fastapi import FastAPI

app = FastAPI()


@app.get("/json")
async def json_message():
    return {"message": "Hello, World!"}
