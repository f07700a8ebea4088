"""Static files stay fresh across deploys and lost events, and stay inside
their mount: the edges of the memory cache.

* Replacing a mount's root the two ways people deploy (``rm -rf root &&
  cp -r new root``, and ``mv root old && mv new root``) must not leave the
  cache serving the old files, or missing ones, or stop seeing later edits.
* An inotify queue overflow (events lost) drops everything and watches the
  tree again, directories created meanwhile included.
* A precompressed sibling (``app.js.gz``) that is a symlink leading out of
  the root is refused like the file itself would be.
* A directory redirect never builds a scheme-relative ``//host/`` Location.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import httpx
import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, wait_for


def serve(rush_server: ServerFactory, root: Path) -> RushServer:
    return rush_server("", "--static", f"/={root}")


def body(server: RushServer, path: str, **headers: str) -> tuple[int, bytes]:
    response = httpx.get(f"{server.url}{path}", headers=headers, timeout=GUARD_TIMEOUT)
    return response.status_code, response.content


def eventually(server: RushServer, path: str, expected: tuple[int, bytes], what: str) -> None:
    """Polls (a client that keeps requesting) until ``path`` answers ``expected``."""
    wait_for(lambda: body(server, path) == expected, f"{what}: {path} -> {expected}")


def make_site(root: Path, version: str) -> Path:
    root.mkdir(parents=True)
    (root / "a.txt").write_text(f"a {version}")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text(f"b {version}")
    return root


@pytest.mark.parametrize("style", ["rm-and-copy", "rename"])
def test_a_deploy_that_replaces_the_root_is_seen_and_watched(
    style: str, rush_server: ServerFactory, tmp_path: Path
) -> None:
    root = make_site(tmp_path / "site", "v1")
    new = make_site(tmp_path / "new", "v2")
    server = serve(rush_server, root)
    assert body(server, "/a.txt") == (200, b"a v1")
    assert body(server, "/sub/b.txt") == (200, b"b v1")
    assert body(server, "/c.txt")[0] == 404  # cached as missing
    (new / "c.txt").write_text("c v2")
    if style == "rm-and-copy":
        shutil.rmtree(root)
        # Requests in the window where the root does not exist.
        assert body(server, "/a.txt")[0] == 404
        shutil.copytree(new, root)
    else:
        root.rename(tmp_path / "old")
        new.rename(root)
    eventually(server, "/a.txt", (200, b"a v2"), "the deployed file")
    eventually(server, "/c.txt", (200, b"c v2"), "a file that was missing before the deploy")
    # Later edits of the deployed tree are seen too: it is watched.
    (root / "sub" / "b.txt").write_text("b v3")
    eventually(server, "/sub/b.txt", (200, b"b v3"), "an edit after the deploy")
    (root / "a.txt").write_text("a v3")
    eventually(server, "/a.txt", (200, b"a v3"), "an edit after the deploy")


def test_an_inotify_overflow_drops_the_cache_and_watches_again(rush_server: ServerFactory, tmp_path: Path) -> None:
    root = make_site(tmp_path / "site", "v1")
    server = serve(rush_server, root)
    worker = server.single_worker()
    assert body(server, "/a.txt") == (200, b"a v1")
    # With the worker stopped, more changes than the kernel queues (16,384
    # events by default) overflow its inotify queue; a directory created
    # meanwhile has no watch yet.
    os.kill(worker, signal.SIGSTOP)
    try:
        flood = root / "flood"
        flood.mkdir()
        for index in range(9000):
            (flood / str(index)).touch()
        shutil.rmtree(flood)
        (root / "late").mkdir()
        (root / "late" / "d.txt").write_text("d v1")
        (root / "a.txt").write_text("a v2")
    finally:
        os.kill(worker, signal.SIGCONT)
    eventually(server, "/a.txt", (200, b"a v2"), "a change lost in the overflow")
    assert body(server, "/late/d.txt") == (200, b"d v1")
    # The directory created during the overflow is watched now.
    (root / "late" / "d.txt").write_text("d v2")
    eventually(server, "/late/d.txt", (200, b"d v2"), "an edit in a directory created during the overflow")


def test_a_precompressed_sibling_leading_out_of_the_root_is_not_served(
    rush_server: ServerFactory, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.gz"
    secret.write_bytes(b"the secret")
    root = tmp_path / "site"
    root.mkdir()
    (root / "app.js").write_text("console.log(1)")
    (root / "app.js.gz").symlink_to(secret)
    server = serve(rush_server, root)
    response = httpx.get(f"{server.url}/app.js", headers={"Accept-Encoding": "gzip"}, timeout=GUARD_TIMEOUT)
    assert response.status_code == 200
    assert response.headers.get("content-encoding") is None
    assert response.content == b"console.log(1)"
    assert b"secret" not in response.content


def test_a_directory_redirect_is_never_scheme_relative(rush_server: ServerFactory, tmp_path: Path) -> None:
    root = tmp_path / "site"
    (root / "evil.example").mkdir(parents=True)
    server = serve(rush_server, root)
    with server.connect() as connection:
        connection.send(b"GET //evil.example HTTP/1.1\r\nHost: test\r\n\r\n")
        response = connection.read_response()
    assert response.status == 301
    assert response.header("location") == "/evil.example/"
