"""Pieces the test apps share: the echo of a request as JSON, a gate a slow
handler waits at until the test releases it (by creating a file), and the
marker files apps report what they saw in."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from rush import Request

# A gated handler waits at most this long for its release file.
GATE_LIMIT = 60.0


def write_marker_file(directory: str, name: str, text: str) -> None:
    """Writes a marker file whole: a test waits for the name to appear, so the
    text goes to a temporary name first and is renamed into place (a plain
    write lets the test read the file between its creation and its text)."""
    final = Path(directory, name)
    temporary = final.with_name(f".{name}.{os.getpid()}.tmp")
    temporary.write_text(text)
    os.replace(temporary, final)


def echo(request: Request, **params: str) -> dict[str, Any]:
    """Everything the handler saw, JSON-friendly (bytes as latin-1 text)."""
    return {
        "method": request.method,
        "path": request.path,
        "raw_path": request.raw_path.decode("latin-1"),
        "query_string": request.query_string.decode("latin-1"),
        "query": request.query.multi_items(),
        "headers": request.headers.multi_items(),
        "body": request.body.decode("latin-1"),
        "body_length": len(request.body),
        "client": list(request.client) if request.client is not None else None,
        "http_version": request.http_version,
        "params": params,
        "pid": os.getpid(),
    }


def gate_paths(request: Request) -> tuple[Path, Path]:
    """The marker file the handler creates on entry, and the file it waits for."""
    directory = Path(request.query["dir"])
    name = request.query.get("name", "gate")
    return directory / f"{name}.entered", directory / f"{name}.release"


def wait_at_gate_blocking(request: Request) -> str:
    entered, release = gate_paths(request)
    entered.write_text(str(os.getpid()))
    deadline = time.monotonic() + GATE_LIMIT
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the gate")
        time.sleep(0.01)
    return f"released {release.name}"
