"""A Litestar app as Litestar's docs write one: typed path and query parameters, a dataclass body,
a streamed response and a WebSocket listener."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

from litestar import Litestar, get, post, websocket_listener
from litestar.response import Stream


@dataclass
class TodoItem:
    title: str
    done: bool = False


TODO_LIST: list[TodoItem] = [TodoItem(title="Start writing TODO list", done=True)]


@get("/todos/{index:int}")
async def get_todo(index: int, verbose: bool = False) -> dict:
    item = TODO_LIST[index]
    return {"title": item.title, "done": item.done, "verbose": verbose}


@post("/todos")
async def add_item(data: TodoItem) -> list[TodoItem]:
    TODO_LIST.append(data)
    return TODO_LIST


async def numbers() -> AsyncGenerator[bytes, None]:
    for number in range(5):
        yield f"{number}\n".encode()


@get("/numbers")
async def stream_numbers() -> Stream:
    return Stream(numbers())


@websocket_listener("/shout")
async def shout(data: str) -> str:
    return data.upper()


app = Litestar([get_todo, add_item, stream_numbers, shout])
