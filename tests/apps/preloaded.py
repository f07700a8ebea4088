"""An ASGI app whose import has side effects a test can count, for
tests/test_preload.py (``--preload``). Everything is driven by environment
variables read at import, all optional except the first:

* ``PRELOAD_TEST_DIR``: a directory; each import appends its pid to
  ``imports``, and each lifespan startup (one per worker) its pid to
  ``startups``; the import reads ``version`` (the "code" a reload may change);
* ``PRELOAD_TEST_ITEMS``: allocate that many small lists (tracked by the
  garbage collector, about 190 bytes each) at import, and write the bytes the
  import grew the process by to ``size``;
* ``PRELOAD_TEST_THREAD``: start a thread of that name at import;
* ``PRELOAD_TEST_FAIL``: the import raises.

Lifespan startup runs ``gc.collect()`` in the worker (which, unless the
preloaded objects were frozen before the fork, writes to every object's
header and so copies every shared page), then answers. HTTP requests are
answered with ``{pid} {version}``.
"""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

DIRECTORY = Path(os.environ["PRELOAD_TEST_DIR"])


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


with open(DIRECTORY / "imports", "a") as imports:
    imports.write(f"{os.getpid()}\n")
VERSION = (DIRECTORY / "version").read_text().strip() if (DIRECTORY / "version").exists() else "1"

if os.environ.get("PRELOAD_TEST_FAIL"):
    raise RuntimeError("this import fails on purpose")

_before = _resident_bytes()
BIG = [[index, index + 1, index + 2] for index in range(int(os.environ.get("PRELOAD_TEST_ITEMS", "0")))]
if BIG:
    (DIRECTORY / "size").write_text(str(_resident_bytes() - _before))

_stop = threading.Event()
if os.environ.get("PRELOAD_TEST_THREAD"):
    threading.Thread(target=_stop.wait, name=os.environ["PRELOAD_TEST_THREAD"], daemon=True).start()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                gc.collect()
                with open(DIRECTORY / "startups", "a") as startups:
                    startups.write(f"{os.getpid()}\n")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = f"{os.getpid()} {VERSION}".encode()
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})
