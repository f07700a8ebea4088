"""rush: the fastest HTTP server for Python.

A Rust core owns the sockets (one epoll loop per worker process) and calls
your handlers on its own thread. Public API::

    from rush import App, Request, Response, run

The native module ``rush._rush`` is private; everything public is here.
"""

from rush._rush import Broadcast, Request, Response, WebSocket, __version__
from rush.app import App
from rush.cache import Cache
from rush.config import Config
from rush.datastructures import Headers, QueryParams
from rush.main import run
from rush.websocket import WebSocketDisconnect

__all__ = [
    "App",
    "Broadcast",
    "Cache",
    "Config",
    "Headers",
    "QueryParams",
    "Request",
    "Response",
    "WebSocket",
    "WebSocketDisconnect",
    "__version__",
    "run",
]
