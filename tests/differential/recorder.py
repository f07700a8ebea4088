"""What an app sees, written down so the differential tests can compare it.

The servers of the differential suite (rush and the reference: uvicorn or
gunicorn) do not load a corpus app directly: they load ``asgi`` or ``wsgi``
from this module, which imports the app named by ``DIFF_TARGET``
(``module:attribute``) and wraps it in a transparent recording middleware. The
app itself stays exactly as its framework's docs write it.

Every event is one JSON line appended to the file named by ``DIFF_RECORD``
(one file per server; both servers run a single worker process, so lines do
not interleave across processes). A line carries the request's tag (the
``x-diff-id`` request header, else the path), a kind and the event:

* ASGI: ``scope`` (the scope with server-specific values masked), every
  ``receive`` result, every ``send`` (and whether ``send`` raised), ``return``
  or ``raise`` when the app call ends. Lifespan events are recorded the same
  way under the tag ``lifespan``.
* WSGI: ``environ`` (masked), what ``start_response`` got, ``close`` when the
  server calls the body's ``close()``, ``return``/``raise`` of the call.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
import time
from typing import Any

_lock = threading.Lock()


def _load_target() -> Any:
    module_name, _, attribute = os.environ["DIFF_TARGET"].partition(":")
    target: Any = importlib.import_module(module_name)
    for part in (attribute or "app").split("."):
        target = getattr(target, part)
    return target


def _write(tag: str, kind: str, event: Any) -> None:
    line = json.dumps({"tag": tag, "kind": kind, "event": event, "at": time.monotonic()}, default=repr)
    with _lock, open(os.environ["DIFF_RECORD"], "a") as record:
        record.write(line + "\n")


def _text(value: Any) -> Any:
    """JSON-friendly form of scope and message values (bytes as latin-1 text)."""
    if isinstance(value, bytes | bytearray):
        return value.decode("latin-1")
    if isinstance(value, dict):
        return {str(key): _text(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_text(item) for item in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)


def _tag_from_headers(headers: Any, fallback: str) -> str:
    for name, value in headers or ():
        if bytes(name).lower() == b"x-diff-id":
            return bytes(value).decode("latin-1")
    return fallback


# ---------------------------------------------------------------------------
# ASGI


def _scope_view(scope: dict[str, Any]) -> dict[str, Any]:
    view = {key: _text(value) for key, value in scope.items() if key not in ("app", "state", "extensions")}
    # Ports are the test's free ports and the client's ephemeral one: only their presence compares.
    if view.get("server"):
        view["server"] = [view["server"][0], "PORT"]
    if view.get("client"):
        view["client"] = [view["client"][0], "PORT"]
    view["state"] = sorted(scope["state"]) if isinstance(scope.get("state"), dict) else scope.get("state", "ABSENT")
    view["extensions"] = sorted(scope.get("extensions") or {})
    return view


def _message_view(message: Any) -> Any:
    if not isinstance(message, dict):
        return repr(message)
    return {key: _text(value) for key, value in message.items()}


_target = None


async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The recording ASGI middleware around the target app."""
    global _target
    if _target is None:
        _target = _load_target()
    kind = scope["type"]
    tag = "lifespan" if kind == "lifespan" else _tag_from_headers(scope.get("headers"), scope.get("path", ""))
    _write(tag, kind, {"scope": _scope_view(scope)})

    async def recorded_receive() -> Any:
        try:
            message = await receive()
        except BaseException as error:
            _write(tag, kind, {"receive_raised": type(error).__name__})
            raise
        _write(tag, kind, {"receive": _message_view(message)})
        return message

    async def recorded_send(message: Any) -> None:
        try:
            await send(message)
        except BaseException as error:
            _write(tag, kind, {"send": _message_view(message), "send_raised": type(error).__name__})
            raise
        _write(tag, kind, {"send": _message_view(message)})

    try:
        await _target(scope, recorded_receive, recorded_send)
    except BaseException as error:
        _write(tag, kind, {"raise": type(error).__name__})
        raise
    _write(tag, kind, {"return": True})


# ---------------------------------------------------------------------------
# WSGI

# Keys whose values belong to the server process, not to the request.
_WSGI_OBJECTS = ("wsgi.input", "wsgi.errors", "wsgi.file_wrapper", "wsgi.input_terminated")


def _environ_view(environ: dict[str, Any]) -> dict[str, Any]:
    view: dict[str, Any] = {}
    for key, value in environ.items():
        if key in _WSGI_OBJECTS:
            view[key] = "PRESENT"
        elif key in ("SERVER_PORT", "REMOTE_PORT"):
            view[key] = "PORT"
        elif isinstance(value, str | int | float | bool | tuple | list) or value is None:
            view[key] = _text(value)
        else:
            view[key] = type(value).__name__
    return view


class _ClosingBody:
    """Passes the app's body through and records whether the server closes it."""

    def __init__(self, body: Any, tag: str) -> None:
        self.body = body
        self.tag = tag

    def __iter__(self) -> Any:
        return iter(self.body)

    def close(self) -> None:
        _write(self.tag, "wsgi", {"close": True})
        close = getattr(self.body, "close", None)
        if close is not None:
            close()


def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
    """The recording WSGI middleware around the target app."""
    global _target
    if _target is None:
        _target = _load_target()
    raw_headers = [
        (key[5:].replace("_", "-").lower().encode(), str(value).encode("latin-1"))
        for key, value in environ.items()
        if key.startswith("HTTP_")
    ]
    tag = _tag_from_headers(raw_headers, environ.get("PATH_INFO", ""))
    _write(tag, "wsgi", {"environ": _environ_view(environ)})

    def recorded_start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        _write(tag, "wsgi", {"start_response": [status, headers, exc_info is not None]})
        return start_response(status, headers, exc_info) if exc_info is not None else start_response(status, headers)

    try:
        body = _target(environ, recorded_start_response)
    except BaseException as error:
        _write(tag, "wsgi", {"raise": type(error).__name__})
        raise
    _write(tag, "wsgi", {"return": type(body).__name__})
    # Lists are sent whole and the server's own file wrapper natively: wrapping them would change
    # what the server does. Any other body with a close() is watched.
    module = type(body).__module__ or ""
    if isinstance(body, list | tuple) or module.split(".")[0] in ("rush", "_rush", "gunicorn"):
        return body
    return _ClosingBody(body, tag) if hasattr(body, "close") else body
