"""An app that starts a Python thread in the worker: the thread writes a
growing counter to the file named by ``RUSHTEST_TICK_FILE``. It can only make
progress while the loop, idle in epoll, has released the GIL."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from rush import App, Request

app = App()
ticks = 0


def tick_forever(path: Path) -> None:
    global ticks
    while True:
        ticks += 1
        path.write_text(str(ticks))
        time.sleep(0.005)


tick_file = os.environ.get("RUSHTEST_TICK_FILE")
if tick_file:
    threading.Thread(target=tick_forever, args=(Path(tick_file),), daemon=True).start()


@app.get("/ticks")
def get_ticks(request: Request) -> dict[str, int]:
    return {"ticks": ticks}
