"""Running async handlers and ASGI apps: inline first, as a task only if needed.

Most requests to an async handler never really wait for anything, so the
loop runs each coroutine's first step at once, on its own thread, and
writes the response in the same pass that read the request (pipelined
responses still leave in one write). Only a coroutine that suspends
continues on asyncio.

Code such as anyio (used by Starlette and FastAPI) needs
``asyncio.current_task()`` to be a real task, the same one before and after
a suspension. So the first step runs *as* a task: a spare task, created
ahead and parked on a future, is entered (``_enter_task``) for the step,
which the native loop runs itself (``coroutine::start`` in src/coroutine.rs,
without the StopIteration a Python-level ``send`` raises; an ASGI worker
keeps the spare entered across the steps of one pass of its loop). If
the coroutine finishes, the spare stays spare for the next request, unless
the step left a mark on it (cancelled, renamed or kept it: see
:meth:`CoroutineRunner.renew_spare`). If it suspends,
:meth:`CoroutineRunner.adopt` lets the spare continue it from where it
stopped, and a new spare is made. Each coroutine runs in its own copy of the
context the worker started with (never of the current one), in every step,
so context variables never leak between requests.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Generator
from functools import partial
from typing import Any


class _Resume:
    """Continues a coroutine that already ran its first step.

    asyncio cannot adopt a started coroutine, so this awaitable hands the
    future it yielded up to the task and relays everything after that, as
    ``yield from`` would for a fresh coroutine, in the coroutine's context.
    """

    __slots__ = ("context", "coroutine", "error", "yielded")

    def __init__(
        self, coroutine: Any, yielded: Any, context: contextvars.Context, error: BaseException | None = None
    ) -> None:
        self.coroutine = coroutine
        self.yielded = yielded
        self.context = context
        self.error = error

    def __await__(self) -> Generator[Any, Any, Any]:
        coroutine, to_yield, run, error = self.coroutine, self.yielded, self.context.run, self.error
        while True:
            if error is not None:
                try:
                    to_yield = run(coroutine.throw, error)
                except StopIteration as finished:
                    return finished.value
                error = None
            try:
                sent = yield to_yield
            except GeneratorExit:
                coroutine.close()
                raise
            except BaseException as thrown:  # noqa: BLE001 - relayed into the coroutine
                error = thrown
                continue
            try:
                to_yield = run(coroutine.send, sent)
            except StopIteration as finished:
                return finished.value


async def _continue_cancelled(coroutine: Any, context: contextvars.Context) -> Any:
    return await _Resume(coroutine, None, context, asyncio.CancelledError())


async def _adopt(assignment: asyncio.Future[tuple[Any, Any, contextvars.Context]]) -> Any:
    coroutine, yielded, context = await assignment
    return await _Resume(coroutine, yielded, context)


class CoroutineRunner:
    """Starts coroutines for the native loop (see the module docstring)."""

    # The loop reads `spare` and `loop` once, and `spare` again after each
    # `adopt` (src/coroutine.rs, `Runner`).
    __slots__ = ("assignment", "loop", "on_done", "spare")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_done: Callable[[int, int, asyncio.Task[Any]], None]) -> None:
        self.loop = loop
        self.on_done = on_done
        self._make_spare()

    def _make_spare(self) -> None:
        self.assignment: asyncio.Future[tuple[Any, Any, contextvars.Context]] = self.loop.create_future()
        self.spare = self.loop.create_task(_adopt(self.assignment))

    def adopt(self, coroutine: Any, yielded: Any, context: contextvars.Context, key: int, request_id: int) -> None:
        """Continues a coroutine whose first step (run natively, with
        ``self.spare`` as the current task, in ``context``) suspended; its end
        is reported to ``on_done(key, request_id, task)``."""
        task, assignment = self.spare, self.assignment
        if assignment.cancelled():
            # The coroutine cancelled its own (spare) task during the step:
            # deliver that cancellation to it in a task of its own. The
            # cancelled spare ends by itself and is no one's any more.
            task = self.loop.create_task(_continue_cancelled(coroutine, context))
        else:
            assignment.set_result((coroutine, yielded, context))
        self._make_spare()
        task.add_done_callback(partial(self.on_done, key, request_id))

    def renew_spare(self) -> None:
        """Replaces a spare that a first step, which then finished, left a
        mark on (cancelled it, renamed it, kept a reference to it; see
        ``Runner::renew_spare_if_touched`` in src/coroutine.rs): under a
        server with a task per request, that task would have ended with its
        request, and the next request must not find it. The old spare ends
        now (a cancelled one by itself), so its done callbacks run."""
        if not self.assignment.done():
            self.assignment.cancel()
        self._make_spare()
