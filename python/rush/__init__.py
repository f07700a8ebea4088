"""rush: the fastest HTTP server for Python.

A Rust core owns the sockets (one epoll loop per worker process) and calls
your handlers on its own thread. Public API::

    from rush import App, Request, Response, run

The native module ``rush._rush`` is private; everything public is here.
"""

from rush._rush import Request, Response, __version__
from rush.app import App
from rush.cache import Cache
from rush.config import Config
from rush.datastructures import Headers, QueryParams
from rush.main import run

__all__ = ["App", "Cache", "Config", "Headers", "QueryParams", "Request", "Response", "__version__", "run"]
