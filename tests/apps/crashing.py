"""An app whose worker dies as soon as it starts while ``RUSHTEST_EXIT_AT_START``
is set: the worker calls ``os._exit`` with that code while importing this
module. Only workers import it (the supervisor never loads the app), so the
supervisor sees a worker that dies within a moment of every start: a crash loop.
Without the variable it is a normal app with ``GET /pid``."""

from __future__ import annotations

import os

from rush import App, Request

if os.environ.get("RUSHTEST_EXIT_AT_START"):
    os._exit(int(os.environ["RUSHTEST_EXIT_AT_START"]))

app = App()


@app.get("/pid")
def pid(request: Request) -> str:
    return str(os.getpid())
