"""An app that fails to import while the file named by ``RUSHTEST_BREAK_FILE``
exists: a deploy gone wrong, for reload tests."""

from __future__ import annotations

import os
from pathlib import Path

from rush import App, Request

if Path(os.environ["RUSHTEST_BREAK_FILE"]).exists():
    raise RuntimeError("tests.apps.breakable is broken now")

app = App()


@app.get("/pid")
def pid(request: Request) -> str:
    return str(os.getpid())
