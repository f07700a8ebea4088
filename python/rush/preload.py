"""``--preload``: the application imported once, in the supervisor, and
shared by every worker forked from it.

Without ``--preload`` each worker imports the application itself after the
fork, so N workers hold N private copies of everything it allocates at
import. With it, `load` imports it in the supervisor before the first fork
(before anything is bound: no event loop exists yet, and rush has started
no thread), and every worker uses that object: its memory is shared
copy-on-write until a worker writes to it.

Python writes to an object it only reads in two ways: its reference count
(nothing to do about that) and the garbage collector's bookkeeping, which
every collection updates for each tracked object it walks. `before_fork`
therefore runs ``gc.collect()`` (so that garbage is not frozen) then
``gc.freeze()``: every object alive in the supervisor moves to the
permanent generation, which a worker's collections do not walk, so they do
not dirty (and copy) the shared pages. Freezing costs no copy and is
repeated before each fork, since the supervisor allocates a little as it
runs.

What the import started does not cross the fork in one piece: a thread
exists only in the supervisor (the workers get its memory, but not the
thread, and a lock it held stays held), a socket or database connection is
shared by every worker (their bytes interleave on it), and a random
generator seeded at import gives every worker the same sequence.
`before_fork` names, in one warning, the threads alive at fork time.

A reload (SIGHUP) replaces the workers as usual, but the new ones are forked
from the same imported application, as gunicorn's ``preload_app`` does: new
code needs a restart. Importing again in the supervisor is not safe in
general: modules cannot be unloaded, so a re-import runs beside the old
generation (its threads and sockets still open, Django's app registry
already populated, NumPy refusing a second load), and the supervisor would
carry both for the rest of its life.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from rush import logs
from rush.config import Config

# The application, once imported in the supervisor; workers forked afterwards inherit it.
_preloaded: list[Any] = []
# The threads already named in a warning (by ident), so that each is named once.
_warned_threads: set[int] = set()


def load(config: Config) -> None:
    """Imports the application in this process (the supervisor); raises
    `rush.loading.AppLoadError` (or what the app's factory raised) if it cannot."""
    _preloaded[:] = [config.load_app()]


def is_loaded() -> bool:
    return bool(_preloaded)


def app_for_worker(config: Config) -> Any:
    """The application a worker serves: the preloaded one, or one it imports itself."""
    return _preloaded[0] if _preloaded else config.load_app()


def before_fork() -> None:
    """With a preloaded app: freezes the supervisor's objects out of the
    collector's reach, and warns once about each thread alive (threads do
    not cross a fork)."""
    if not _preloaded:
        return
    gc.collect()
    gc.freeze()
    alive = [
        thread
        for thread in threading.enumerate()
        if thread is not threading.main_thread() and thread.ident not in _warned_threads
    ]
    if not alive:
        return
    _warned_threads.update(thread.ident for thread in alive if thread.ident is not None)
    logs.error_logger.warning(
        "--preload: %d thread(s) alive in the supervisor at fork time, started while importing the app: %s; "
        "they do not exist in the workers (start them after the fork, e.g. in ASGI lifespan startup)",
        len(alive),
        ", ".join(repr(thread.name) for thread in alive),
    )
