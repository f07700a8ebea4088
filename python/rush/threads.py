"""A thread pool for blocking apps (``--threads N``), feeding results back to the loop.

The loop hands a request to :meth:`BlockingPool.schedule_wsgi` and moves on
to other connections. A pool thread calls the app (holding the GIL only
while Python runs), then queues ``(key, request_id, item)`` and writes one
byte to a pipe that the native loop watches. The loop wakes, calls
:meth:`drain`, and writes each response on its own thread: connections and
the loop's Python objects are never touched from a pool thread.

A body that is not a list or tuple is streamed: the pool thread iterates it
and passes each chunk through a :class:`BodyChannel`, which holds at most
``HIGH_WATER`` bytes. When it is full the thread waits (without the GIL)
until the loop has taken the chunks, which the loop does only while its
client keeps up; when the client leaves, the loop cancels the channel and
the thread stops at the app's next chunk and calls the body's ``close()``.
So a slow client cannot grow memory, and an endless generator whose client
left frees its thread.
"""

from __future__ import annotations

import collections
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from rush._rush import call_wsgi

# Bytes of body a channel holds before the pool thread waits for the loop.
HIGH_WATER = 1024 * 1024


class BodyChannel:
    """Chunks of one streamed WSGI body, from a pool thread to the loop."""

    def __init__(self, notify: Any) -> None:
        self._notify = notify
        self._condition = threading.Condition()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._bytes = 0
        self._done = False
        self._error: BaseException | None = None
        self._cancelled = False
        # The loop has been told about chunks it has not taken yet.
        self._notified = False

    # -- the pool thread --------------------------------------------------

    def put(self, chunk: bytes) -> bool:
        """Queues a chunk, waiting while the channel is full; False once the
        loop cancelled the channel (the client left)."""
        with self._condition:
            while self._bytes >= HIGH_WATER and not self._cancelled:
                self._condition.wait()
            if self._cancelled:
                return False
            self._chunks.append(chunk)
            self._bytes += len(chunk)
            tell = not self._notified
            self._notified = True
        if tell:
            self._notify()
        return True

    def finish(self, error: BaseException | None = None) -> None:
        """The body ended (``error``: the iterable raised)."""
        with self._condition:
            self._done = True
            self._error = error
            self._notified = True
        self._notify()

    # -- the loop -----------------------------------------------------------

    def take(self) -> tuple[list[bytes], bool, BaseException | None]:
        """Everything queued, whether the body is over, and its error."""
        with self._condition:
            chunks = list(self._chunks)
            self._chunks.clear()
            self._bytes = 0
            self._notified = False
            self._condition.notify()
            return chunks, self._done, self._error

    def cancel(self) -> None:
        """The client is gone: the pool thread stops at its next chunk."""
        with self._condition:
            self._cancelled = True
            self._condition.notify()


class BlockingPool:
    def __init__(self, threads: int) -> None:
        self.executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rush-blocking")
        self.finished: collections.deque[tuple[int, int, Any]] = collections.deque()
        self.reader, self.writer = os.pipe()
        os.set_blocking(self.reader, False)
        os.set_blocking(self.writer, False)

    def schedule_wsgi(self, app: Any, environ: dict[str, Any], key: int, request_id: int, stream: bool = True) -> None:
        future = self.executor.submit(self._run_wsgi, app, environ, key, request_id, stream)
        future.add_done_callback(partial(self._done, key, request_id))

    def _run_wsgi(self, app: Any, environ: dict[str, Any], key: int, request_id: int, stream: bool) -> Any:
        """Calls the app; a streamed body gets a channel, and this thread
        goes on iterating it once the loop has the response head. Without
        ``stream`` (an answer that fills the response cache) the body is
        collected here, whole."""
        response = call_wsgi(app, environ, stream)
        body = response.take_body()
        if body is None:
            return response
        channel = BodyChannel(partial(self._post, key, request_id, None))
        response.attach_channel(channel)
        # The head goes to the loop now (through the future's completion);
        # the body follows through the channel from a new task on this pool,
        # so the future can complete.
        self.executor.submit(self._stream_body, body, channel)
        return response

    @staticmethod
    def _stream_body(body: Any, channel: BodyChannel) -> None:
        try:
            while (chunk := body.next_chunk()) is not None:
                if not channel.put(chunk):
                    break
            else:
                channel.finish()
        except BaseException as error:  # noqa: BLE001 - the loop logs it with its request
            channel.finish(error)
        finally:
            body.close()

    def _done(self, key: int, request_id: int, future: Future[Any]) -> None:
        self._post(key, request_id, future)

    def _post(self, key: int, request_id: int, item: Any) -> None:
        self.finished.append((key, request_id, item))
        try:
            os.write(self.writer, b"\0")
        except BlockingIOError:
            pass  # The pipe is full, so the loop is already due to wake up.

    def drain(self) -> list[tuple[int, int, Any]]:
        items = []
        while self.finished:
            items.append(self.finished.popleft())
        return items

    def shutdown(self) -> None:
        self.executor.shutdown(wait=True, cancel_futures=False)
        os.close(self.reader)
        os.close(self.writer)
