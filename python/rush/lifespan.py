"""ASGI lifespan: run an app's startup and shutdown events around serving.

With ``--lifespan auto`` (the default) an app that fails on the lifespan
scope before starting up is taken not to support it, and serving goes on
without it (as most servers do). With ``on``, that is an error. A
``lifespan.startup.failed`` message always stops the worker, with the app's
message in the log. The ``state`` dict the app fills during startup is
copied (shallowly) into every request's scope.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rush import logs

LIFESPAN_SCOPE_VERSION = {"version": "3.0", "spec_version": "2.0"}


class Lifespan:
    def __init__(self, app: Any, mode: str) -> None:
        self.app = app
        self.mode = mode
        self.state: dict[str, Any] = {}
        self.supported = mode != "off"
        self.messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.started = asyncio.Event()
        self.stopped = asyncio.Event()
        self.failure: str | None = None
        self.task: asyncio.Task[None] | None = None

    async def startup(self) -> bool:
        """Runs startup; False means the worker must not serve."""
        if not self.supported:
            return True
        scope = {"type": "lifespan", "asgi": dict(LIFESPAN_SCOPE_VERSION), "state": self.state}
        self.task = asyncio.get_running_loop().create_task(self._run(scope))
        await self.messages.put({"type": "lifespan.startup"})
        await self.started.wait()
        if self.failure is not None:
            logs.error_logger.error("ASGI lifespan startup failed: %s", self.failure)
            return False
        if self.task.done() and self.task.exception() is not None:
            error = self.task.exception()
            if self.mode == "on":
                logs.error_logger.error("ASGI lifespan startup raised", exc_info=error)
                return False
            logs.error_logger.info("the app does not support ASGI lifespan (%r); continuing without it", error)
            self.supported = False
        return True

    async def shutdown(self, timeout: float) -> None:
        if not self.supported or self.task is None or self.task.done():
            return
        await self.messages.put({"type": "lifespan.shutdown"})
        try:
            await asyncio.wait_for(self.stopped.wait(), timeout)
        except TimeoutError:
            logs.error_logger.error("ASGI lifespan shutdown did not finish within %.0f s", timeout)
            self.task.cancel()
            return
        if self.failure is not None:
            logs.error_logger.error("ASGI lifespan shutdown failed: %s", self.failure)

    async def _run(self, scope: dict[str, Any]) -> None:
        try:
            await self.app(scope, self.receive, self.send)
        finally:
            # An app that returns or raises releases anyone still waiting.
            self.started.set()
            self.stopped.set()

    async def receive(self) -> dict[str, Any]:
        return await self.messages.get()

    async def send(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "lifespan.startup.complete":
            self.started.set()
        elif kind == "lifespan.startup.failed":
            self.failure = message.get("message", "") or "(no message)"
            self.started.set()
        elif kind == "lifespan.shutdown.complete":
            self.stopped.set()
        elif kind == "lifespan.shutdown.failed":
            self.failure = message.get("message", "") or "(no message)"
            self.stopped.set()
        else:
            raise RuntimeError(f"unexpected lifespan message {kind!r}")
