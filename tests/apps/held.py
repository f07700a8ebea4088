"""An app whose workers are slow to load it whenever the test wants: while
the file named by ``RUSHTEST_HOLD_FILE`` exists, a worker importing this
module first creates ``<that file>.<its pid>`` and then waits (at most
``HOLD_LIMIT`` seconds) until the file is gone. A test creates the file,
sends SIGHUP, and the reload's new worker stays starting while the test
sends more signals or kills workers. Without the file it loads at once."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rush import App, Request

HOLD_LIMIT = 60.0

_hold = Path(os.environ["RUSHTEST_HOLD_FILE"])
if _hold.exists():
    _hold.with_name(f"{_hold.name}.{os.getpid()}").touch()
    _deadline = time.monotonic() + HOLD_LIMIT
    while _hold.exists() and time.monotonic() < _deadline:
        time.sleep(0.01)

app = App()


@app.get("/pid")
def pid(request: Request) -> str:
    return str(os.getpid())
