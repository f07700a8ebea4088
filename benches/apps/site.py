"""The files the static scenarios serve, written on demand into benches/.site/ (not committed).

A small ``index.html`` (the rush-v2 group's cached page at ``/``), and two text
files of exact sizes for the static group: ``file-4k.txt`` (4 KiB) and
``file-1m.txt`` (1 MiB). Their content is a function of their size only, so
every server, every run and every machine serves the same bytes, and the
correctness check can compare a digest instead of keeping a 1 MiB body around.

`ensure_site` is idempotent and rewrites a file only when its bytes differ, so
calling it while a server runs (rush watches the directory with inotify) changes
nothing. The servers' app modules call it at import; the runner calls it before
starting anything (nginx reads the directory without any Python of ours).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

SITE_DIR = Path(__file__).resolve().parents[1] / ".site"

INDEX_HTML = (
    b'<!doctype html>\n<html lang="en">\n<head><meta charset="utf-8"><title>rush</title></head>\n'
    b"<body><h1>Hello from a cached static file</h1><p>Served by the rush-v2 benchmark group.</p></body>\n"
    b"</html>\n"
)
SMALL_FILE, LARGE_FILE = "file-4k.txt", "file-1m.txt"
SMALL_SIZE, LARGE_SIZE = 4 * 1024, 1024 * 1024


def text_of_size(size: int) -> bytes:
    """``size`` bytes of numbered 64-byte lines: readable when opened, and exactly the right length."""
    line_count = size // 64 + 1
    lines = (
        f"line {number:07d} of a benchmark file, the same on every machine".ljust(63, ".")
        for number in range(line_count)
    )
    return "\n".join(lines).encode()[:size]


def site_files() -> dict[str, bytes]:
    """File name -> content, for every file of the site."""
    return {
        "index.html": INDEX_HTML,
        SMALL_FILE: text_of_size(SMALL_SIZE),
        LARGE_FILE: text_of_size(LARGE_SIZE),
    }


def sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def ensure_site(directory: Path = SITE_DIR) -> Path:
    """Writes the site into ``directory`` (only the files whose bytes differ) and returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in site_files().items():
        path = directory / name
        if not path.exists() or path.read_bytes() != content:
            # Written aside then renamed, so a server watching the directory never sees half a file.
            partial = path.with_name(f".{name}.partial")
            partial.write_bytes(content)
            partial.replace(path)
    return directory
