"""Request bodies as uvicorn, hypercorn and gunicorn take them (issue 33,
item 1), over real sockets against real rush processes with default flags
unless a test says otherwise.

* An ASGI app reading ``receive()`` as the body comes gets a 2 GB upload:
  no body limit applies by default (``--max-body-size 0``), as under the
  references, which have none.
* A 200 MB multipart upload reaches Flask and Django (WSGI, so rush
  collects and spools it first) with default flags.
* In-memory bodies are bounded per worker (64 MiB); past it even small
  bodies go to temporary files.
* Collected bodies are bounded per worker by ``--max-spool-size``: with
  uploads holding the budget, the worker's temporary files and memory stay
  within it, the next upload gets 503 with Retry-After before any of its
  body is read, one larger than the whole budget 413, and once the held
  uploads are answered the refused one goes through.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import Gate, RushServer, ServerFactory, fd_targets, rss_kib, wait_for
from test_body_limit import UPLOADS

APP = "tests.apps.uploads"
MIB = 1024 * 1024
# One random block repeated: a body of any size without storing it.
BLOCK = os.urandom(MIB)


def pattern(size: int) -> Iterator[bytes]:
    """``size`` bytes of BLOCK repeated, in pieces of at most 1 MiB."""
    sent = 0
    while sent < size:
        piece = BLOCK[: min(MIB, size - sent)]
        sent += len(piece)
        yield piece


def pattern_digest(size: int) -> str:
    digest = hashlib.sha256()
    for piece in pattern(size):
        digest.update(piece)
    return digest.hexdigest()


def head(path: str, length: int, content_type: str = "application/octet-stream") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def upload(server: RushServer, path: str, size: int) -> dict[str, object]:
    """Sends ``size`` bytes of the pattern and returns the app's JSON answer."""
    with server.connect() as connection:
        connection.send(head(path, size))
        for piece in pattern(size):
            connection.send(piece)
        response = connection.read_response("POST")
    assert response.status == 200, response
    return response.json()


@pytest.mark.timeout(300)
def test_asgi_app_reading_as_it_comes_gets_2gb_with_default_flags(rush_server: ServerFactory) -> None:
    size = 2 * 1000**3
    server = rush_server(f"{APP}:asgi_app", "--interface", "asgi")
    assert upload(server, "/", size) == {"size": size, "sha256": pattern_digest(size)}


def multipart() -> tuple[bytes, bytes]:
    """The parts of a multipart form before and after its file's bytes."""
    boundary = "rush-uploads-boundary"
    prefix = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="name"\r\n\r\nbig\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; filename="big.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    suffix = f"\r\n--{boundary}--\r\n".encode()
    return prefix, suffix


@pytest.mark.timeout(300)
@pytest.mark.parametrize("app", ["tests.apps.flask_app:app", "tests.apps.django_app:application"])
def test_200mb_multipart_upload_into_wsgi_frameworks_with_default_flags(rush_server: ServerFactory, app: str) -> None:
    size = 200 * 1000**2
    server = rush_server(app, "--interface", "wsgi")
    prefix, suffix = multipart()
    content_type = "multipart/form-data; boundary=rush-uploads-boundary"
    with server.connect() as connection:
        connection.send(head("/form", len(prefix) + size + len(suffix), content_type))
        connection.send(prefix)
        for piece in pattern(size):
            connection.send(piece)
        connection.send(suffix)
        response = connection.read_response("POST")
    assert response.status == 200, response
    answer = response.json()
    assert answer["name"] == "big"
    assert answer["file"] == {"filename": "big.bin", "size": size, "sha256": pattern_digest(size)}


def spooled_bytes(pid: int) -> int:
    """The size of the unnamed temporary files process ``pid`` holds open."""
    total = 0
    for descriptor, target in fd_targets(pid).items():
        if target.endswith("(deleted)") and not target.startswith("/memfd:"):
            try:
                total += os.stat(f"/proc/{pid}/fd/{descriptor}").st_size
            except FileNotFoundError:
                continue
    return total


@pytest.mark.timeout(120)
def test_concurrent_wsgi_uploads_stay_within_the_spool_budget(rush_server: ServerFactory) -> None:
    budget = 64 * MIB
    size = 20 * MIB
    server = rush_server(f"{APP}:wsgi_app", "--interface", "wsgi", "--max-spool-size", "64M")
    worker = server.single_worker()
    rss_before = rss_kib(worker)
    held = [server.connect() for _ in range(3)]
    sent = size - MIB
    try:
        # Three uploads take 60 MiB of the 64: each sends all but its last MiB.
        for connection in held:
            connection.send(head("/", size))
            for piece in pattern(sent):
                connection.send(piece)
        wait_for(lambda: spooled_bytes(worker) >= 3 * sent, "the held uploads spooled")
        # A fourth does not fit beside them: 503 with Retry-After at its head.
        with server.connect() as refused:
            refused.send(head("/", size))
            response = refused.read_response("POST")
            assert response.status == 503, response
            assert response.header("retry-after") == "5"
        # One larger than the whole budget could never fit: 413.
        with server.connect() as too_large:
            too_large.send(head("/", budget + 1))
            assert too_large.read_response("POST").status == 413
        assert spooled_bytes(worker) <= budget
        # Bodies past 1 MiB are on disk, not in memory.
        assert rss_kib(worker) - rss_before < 16 * 1024
        # The last MiB of each: the pattern restarts at every MiB, so it is BLOCK.
        for connection in held:
            connection.send(BLOCK)
        for connection in held:
            response = connection.read_response("POST")
            assert response.status == 200, response
            assert json.loads(response.body)["size"] == size
    finally:
        for connection in held:
            connection.close()
    # The held uploads answered, the budget is free again.
    wait_for(lambda: spooled_bytes(worker) == 0, "the spool files closed")
    assert upload(server, "/", size)["size"] == size
    server.wait_for_log(r"503 request body spool full")


@pytest.mark.parametrize("protocol", ["h1", "h2"])
def test_a_body_without_a_length_past_the_spool_budget_is_503(rush_server: ServerFactory, protocol: str) -> None:
    """A chunked HTTP/1.1 body, an HTTP/2 body without ``content-length``:
    the budget is counted as it arrives, and the upload that no longer fits
    beside a held one gets 503 (with Retry-After over HTTP/1.1), logged as
    a refusal; one larger than the whole budget 413."""
    server = rush_server(f"{APP}:wsgi_app", "--interface", "wsgi", "--max-spool-size", "2M", "--http", "auto")
    worker = server.single_worker()
    with server.connect() as held:
        held.send(head("/", 3 * MIB // 2))
        # Past 1 MiB, so it is on disk where the test can see it arrive.
        held.send(BLOCK + BLOCK[:1])
        wait_for(lambda: spooled_bytes(worker) > MIB, "the held upload spooled")
        answer = UPLOADS[protocol](server, "/", BLOCK)
        assert answer.status == 503, answer
        server.wait_for_log(r"\[WARNING\] refused a request from 127\.0\.0\.1:\d+: 503 request body spool full")
        held.send(BLOCK[1 : MIB // 2])
        assert held.read_response("POST").status == 200
    assert UPLOADS[protocol](server, "/", BLOCK).status == 200
    assert UPLOADS[protocol](server, "/", BLOCK * 3).status == 413


def test_in_memory_bodies_are_bounded_per_worker(rush_server: ServerFactory) -> None:
    """Bodies under 1 MiB stay in memory, but only up to 64 MiB summed over
    the worker's uploads: 100 uploads each holding 900 KB unfinished
    (88 MB in all) put the ones past 64 MiB in temporary files, and the
    worker's memory grows by less than the 88 MB they hold."""
    count, piece = 100, 900 * 1000
    server = rush_server(f"{APP}:wsgi_app", "--interface", "wsgi")
    worker = server.single_worker()
    rss_before = rss_kib(worker)
    held = [server.connect() for _ in range(count)]
    try:
        for connection in held:
            connection.send(head("/", piece + 1))
            connection.send(BLOCK[:piece])
        in_memory = 64 * MIB // piece
        spooled = count - in_memory - 1
        wait_for(lambda: spooled_bytes(worker) >= spooled * piece, "the uploads past the memory budget spooled")
        # About 70 MiB here (64 of bodies, the rest buffers); all 88 MB without the budget.
        assert rss_kib(worker) - rss_before < count * piece // 1024
        for connection in held:
            connection.send(b"x")
        for connection in held:
            assert json.loads(connection.read_response("POST").body)["size"] == piece + 1
    finally:
        for connection in held:
            connection.close()


def test_a_pool_thread_reading_its_input_keeps_its_share_of_the_budget(
    rush_server: ServerFactory, tmp_path: Path
) -> None:
    """Under ``--threads`` the loop lets its buffer go once the request is
    handed to a pool thread, but the app still has the file: it counts
    against the budget until the app is done with ``wsgi.input``."""
    server = rush_server(f"{APP}:wsgi_app", "--interface", "wsgi", "--threads", "2", "--max-spool-size", "2M")
    gate = Gate(tmp_path)
    with server.connect() as held:
        size = 3 * MIB // 2
        held.send(head(gate.target, size))
        held.send(BLOCK + BLOCK[: size - MIB])
        gate.wait_entered()
        # The held body (1.5 MiB) is the app's now; 1 MiB more does not fit.
        with server.connect() as refused:
            refused.send(head("/", MIB))
            assert refused.read_response("POST").status == 503
        gate.release()
        assert held.read_response("POST").status == 200
    # Once the app's input is gone, the budget is free again. The pool
    # thread lets it go after its answer went out, so the client may ask
    # before that: each ask until then is a 503, never anything else.
    worker = server.single_worker()
    wait_for(lambda: spooled_bytes(worker) == 0, "the app's input closed")
    statuses: list[int] = []

    def fits() -> bool:
        with server.connect() as connection:
            connection.send(head("/", MIB))
            for piece in pattern(MIB):
                connection.send(piece)
            statuses.append(connection.read_response("POST").status)
        return statuses[-1] == 200

    wait_for(fits, "the budget to be free again")
    assert set(statuses) <= {200, 503}, statuses
