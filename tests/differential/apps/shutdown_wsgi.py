"""A WSGI app whose streamed body is still being sent when the server stops or replaces its worker,
for tests/differential/test_diff_shutdown.py.

``/stream?dir=`` yields a first piece, creates ``<dir>/stream.entered`` and waits until the test
creates ``<dir>/stream.release`` before it yields the second; the body's ``close()`` (which PEP 3333
says the server must call) writes ``<dir>/stream.closed``. Anything else answers ``hello``.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import parse_qs


class GatedBody:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __iter__(self):
        yield b"first\n"
        (self.directory / "stream.entered").touch()
        while not (self.directory / "stream.release").exists():
            time.sleep(0.01)
        yield b"second\n"

    def close(self) -> None:
        (self.directory / "stream.closed").touch()


def app(environ, start_response):
    if environ["PATH_INFO"] == "/stream":
        directory = Path(parse_qs(environ["QUERY_STRING"])["dir"][0])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return GatedBody(directory)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
    return [b"hello"]
