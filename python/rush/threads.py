"""A thread pool for blocking apps (``--threads N``), feeding results back to the loop.

The loop hands a request to :meth:`BlockingPool.schedule` and moves on to
other connections. A pool thread runs the app (holding the GIL only while
Python runs), then queues ``(key, request_id, future)`` and writes one byte to a
pipe that the native loop watches. The loop wakes, calls :meth:`drain`, and
writes each response on its own thread: connections and Python objects of
the loop are never touched from a pool thread.
"""

from __future__ import annotations

import collections
import os
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from rush._rush import call_wsgi


class BlockingPool:
    def __init__(self, threads: int) -> None:
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rush-blocking")
        self.finished: collections.deque[tuple[int, int, Future[Any]]] = collections.deque()
        self.reader, self.writer = os.pipe()
        os.set_blocking(self.reader, False)
        os.set_blocking(self.writer, False)

    def schedule_wsgi(self, app: Any, environ: dict[str, Any], key: int, request_id: int) -> None:
        future = self.executor.submit(call_wsgi, app, environ)
        future.add_done_callback(partial(self._done, key, request_id))

    def _done(self, key: int, request_id: int, future: Future[Any]) -> None:
        self.finished.append((key, request_id, future))
        try:
            os.write(self.writer, b"\0")
        except BlockingIOError:
            pass  # The pipe is full, so the loop is already due to wake up.

    def drain(self) -> list[tuple[int, int, Future[Any]]]:
        items = []
        while self.finished:
            items.append(self.finished.popleft())
        return items

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=False)
        os.close(self.reader)
        os.close(self.writer)
