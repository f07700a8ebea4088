"""`rush.App`: routes, redirects and error handlers, registered with decorators.

The App only records what the user registered. When a worker starts, it
builds the native router from these records (:meth:`App.build_router`); from
then on routing, redirects and plain 404/405 answers happen in Rust, and
Python runs only the handlers themselves.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from rush._rush import Router
from rush.cache import Cache, CacheControl
from rush.websocket import WebSocketRoute

Handler = TypeVar("Handler", bound=Callable[..., Any])

_DEFAULT_METHODS = ("GET",)


@dataclass(frozen=True)
class Route:
    pattern: str
    methods: tuple[str, ...]
    handler: Callable[..., Any]
    cache: Cache | None = None


@dataclass(frozen=True)
class StaticMount:
    prefix: str
    directory: str
    options: dict[str, Any]


@dataclass(frozen=True)
class RedirectRule:
    pattern: str
    location: str
    status: int


def _is_async(handler: Callable[..., Any]) -> bool:
    # An instance with `async def __call__` is an async handler too.
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(type(handler).__call__)


def _check_pattern(pattern: str) -> None:
    if not pattern.startswith("/"):
        raise ValueError(f"route {pattern!r} must start with '/'")


class App:
    """A rush application: handlers take a `Request` and return str, bytes,
    dict/list (JSON) or a `Response`. Path parameters such as
    ``/users/{user_id}`` are passed as keyword arguments; ``{*rest}`` matches
    the rest of the path."""

    def __init__(self) -> None:
        self.routes: list[Route] = []
        self.redirects: list[RedirectRule] = []
        self.error_handlers: dict[int, Callable[..., Any]] = {}
        self.static_mounts: list[StaticMount] = []
        # The worker's cached answers (routes registered with `cache=`).
        self.cache = CacheControl()

    def route(
        self, pattern: str, methods: Iterable[str] = _DEFAULT_METHODS, cache: Cache | None = None
    ) -> Callable[[Handler], Handler]:
        """Registers the decorated function for ``methods`` on ``pattern``.
        GET routes answer HEAD too, without the body. With ``cache``, GET
        answers are cached by the worker (see `rush.Cache`)."""
        _check_pattern(pattern)
        method_list = tuple(method.upper() for method in methods)
        if not method_list:
            raise ValueError("a route needs at least one method")

        def register(handler: Handler) -> Handler:
            self.routes.append(Route(pattern, method_list, handler, cache))
            return handler

        return register

    def get(self, pattern: str, cache: Cache | None = None) -> Callable[[Handler], Handler]:
        return self.route(pattern, ["GET"], cache=cache)

    def post(self, pattern: str) -> Callable[[Handler], Handler]:
        return self.route(pattern, ["POST"])

    def put(self, pattern: str) -> Callable[[Handler], Handler]:
        return self.route(pattern, ["PUT"])

    def patch(self, pattern: str) -> Callable[[Handler], Handler]:
        return self.route(pattern, ["PATCH"])

    def delete(self, pattern: str) -> Callable[[Handler], Handler]:
        return self.route(pattern, ["DELETE"])

    def websocket(self, pattern: str) -> Callable[[Handler], Handler]:
        """Registers ``async def handler(ws, **params)`` for WebSocket
        connections on ``pattern`` (see `rush.websocket`); a plain GET there
        gets 426."""
        _check_pattern(pattern)

        def register(handler: Handler) -> Handler:
            if not _is_async(handler):
                raise TypeError("a WebSocket handler must be an async def function")
            self.routes.append(Route(pattern, ("GET",), WebSocketRoute(handler)))
            return handler

        return register

    def redirect(self, pattern: str, location: str, status: int = 302) -> None:
        """Answers any request for ``pattern`` with a redirect to ``location``,
        natively (no Python runs per request)."""
        _check_pattern(pattern)
        if not 300 <= status < 400:
            raise ValueError("redirect status must be 3xx")
        self.redirects.append(RedirectRule(pattern, location, status))

    def static(
        self,
        prefix: str,
        directory: str | os.PathLike[str],
        *,
        cache: str = "memory",
        max_file_size: int = 1024 * 1024,
        max_cache_size: int = 64 * 1024 * 1024,
        cache_control: str | None = None,
        dotfiles: bool = False,
        allow_symlinks_outside: bool = False,
    ) -> None:
        """Serves the files under ``directory`` at ``prefix``, entirely in Rust.

        Routes win over static files; a mount answers what no route matched.
        ``cache="memory"`` keeps bodies up to ``max_file_size`` (within
        ``max_cache_size`` in total) in memory; ``"filesystem"`` keeps only
        metadata and sends bodies with sendfile. Either way, changes on disk
        are picked up through inotify without a restart. Dotfiles are hidden
        and symlinks leading out of ``directory`` refused unless enabled.
        """
        _check_pattern(prefix)
        if cache not in ("memory", "filesystem"):
            raise ValueError("cache must be 'memory' or 'filesystem'")
        path = os.fspath(directory)
        if not os.path.isdir(path):
            raise ValueError(f"static directory {path!r} does not exist")
        self.static_mounts.append(
            StaticMount(
                prefix,
                os.path.abspath(path),
                {
                    "cache": cache,
                    "max_file_size": max_file_size,
                    "max_cache_size": max_cache_size,
                    "cache_control": cache_control,
                    "dotfiles": dotfiles,
                    "allow_symlinks_outside": allow_symlinks_outside,
                },
            )
        )

    def errorhandler(self, status: int) -> Callable[[Handler], Handler]:
        """Registers a handler for 404 (no route), 405 (wrong method) or 500
        (a handler raised; its traceback is logged first). It takes the
        request and returns a response like any handler; a str/bytes/dict
        result keeps ``status``. A 500 handler that raises, or an async one
        that suspends, falls back to the native 500."""
        if status not in (404, 405, 500):
            raise ValueError("error handlers exist for 404, 405 and 500")

        def register(handler: Handler) -> Handler:
            self.error_handlers[status] = handler
            return handler

        return register

    def build_router(self) -> Router:
        """The native router for this app (built in each worker)."""
        router = Router()
        for rule in self.redirects:
            router.add_redirect(rule.pattern, rule.location, rule.status)
        cache_sizes = [route.cache.max_bytes_value for route in self.routes if route.cache is not None]
        if cache_sizes:
            router.set_cache_size(max(cache_sizes))
        for route in self.routes:
            policy = route.cache.native() if route.cache is not None else None
            shared = route.cache.shared_level() if route.cache is not None else None
            router.add_route(
                route.pattern, list(route.methods), route.handler, _is_async(route.handler), policy, shared
            )
        for mount in self.static_mounts:
            router.add_static(mount.prefix, mount.directory, **mount.options)
        for status, handler in self.error_handlers.items():
            router.add_error_handler(status, handler, _is_async(handler))
        self.cache.attach(router)
        return router
