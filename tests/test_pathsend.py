"""ASGI's ``http.response.pathsend`` extension over real sockets: Starlette's
``FileResponse`` under rush (which lists the extension, so Starlette hands
it the path and rush sends the file natively) against the same app under
uvicorn (which does not, so Starlette streams the file): what the client
sees must be the same.

A relative path (``FileResponse("static/a.pdf")``) is resolved against the
worker's working directory, as a read under uvicorn resolves it; a file that
cannot be opened is a 500 before any byte of the head, over HTTP/1.1 and
HTTP/2.

One deliberate difference: rush answers a conditional GET whose validator
matches the ``ETag`` or ``Last-Modified`` Starlette sent with a 304, as
``--static`` does (RFC 9110 13.2); Starlette's ``FileResponse`` itself does
not evaluate preconditions, so under uvicorn the answer is the whole 200.

The app is tests/apps/file_apps.py.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import (
    GUARD_TIMEOUT,
    PYTHON,
    RushServer,
    ServerFactory,
    clean_environment,
    request,
    wait_for,
)

SIZES = {"small.bin": 4 * 1024, "large.bin": 1024 * 1024}
# The fields both servers' answers must carry alike (Date and Server are each server's own).
COMPARED_FIELDS = ("content-type", "content-length", "etag", "last-modified", "content-range", "accept-ranges")


class Peers:
    """The same app under rush and under uvicorn, and where it keeps its files."""

    def __init__(self, rush: RushServer, uvicorn: RushServer, files: Path, markers: Path) -> None:
        self.rush = rush
        self.uvicorn = uvicorn
        self.files = files
        self.markers = markers

    def fetch(
        self, server: RushServer, method: str, path: str, headers: dict[str, str] | None = None, http2: bool = False
    ) -> httpx.Response:
        # HTTP/2 over cleartext with prior knowledge (rush only: uvicorn speaks HTTP/1.1).
        options = {"http1": False, "http2": True} if http2 else {}
        with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT, **options) as client:  # type: ignore[arg-type]
            return client.request(method, path, headers=headers)

    def both(self, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[httpx.Response, ...]:
        return tuple(self.fetch(server, method, path, headers) for server in (self.rush, self.uvicorn))

    def sent_by_rush(self, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[httpx.Response, str]:
        """Fetches from rush and returns the answer with the message types the app sent."""
        marker = self.markers / f"sent-{method}-{path.strip('/').replace('/', '-')}"
        marker.unlink(missing_ok=True)
        answer = self.fetch(self.rush, method, path, headers)
        wait_for(marker.exists, f"the app to record what it sent for {path}")
        return answer, marker.read_text()


@pytest.fixture(scope="module")
def peers(module_servers: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peers]:
    files = tmp_path_factory.mktemp("files")
    markers = tmp_path_factory.mktemp("markers")
    for name, size in SIZES.items():
        (files / name).write_bytes(os.urandom(size))
    env = clean_environment({"RUSHTEST_FILE_DIR": str(files), "RUSHTEST_MARKER_DIR": str(markers)})
    rush = module_servers("file_apps", env=env)
    uvicorn_command = [str(PYTHON), "-m", "uvicorn", "--loop", "uvloop", "--http", "httptools"]
    uvicorn = module_servers("file_apps", env=env, command=uvicorn_command)
    yield Peers(rush, uvicorn, files, markers)
    # uvicorn ends itself by re-raising SIGTERM: that is its clean exit.
    assert uvicorn.stop() in (0, -signal.SIGTERM), uvicorn.describe()


def assert_same_answer(rush: httpx.Response, uvicorn: httpx.Response) -> None:
    assert rush.status_code == uvicorn.status_code
    for name in COMPARED_FIELDS:
        assert rush.headers.get(name) == uvicorn.headers.get(name), name
    assert rush.content == uvicorn.content


def test_the_scope_lists_pathsend(peers: Peers) -> None:
    # Over HTTP/1.1: pathsend, and Early Hints (tests/test_http2_extensions.py).
    assert peers.fetch(peers.rush, "GET", "/extensions").json() == [
        "http.response.early_hint",
        "http.response.pathsend",
    ]
    assert peers.fetch(peers.uvicorn, "GET", "/extensions").json() == []


@pytest.mark.parametrize("name", list(SIZES))
def test_file_response_is_sent_natively_and_matches_uvicorn(peers: Peers, name: str) -> None:
    rush, sent = peers.sent_by_rush("GET", f"/files/{name}")
    assert sent == "http.response.start,http.response.pathsend"
    uvicorn = peers.fetch(peers.uvicorn, "GET", f"/files/{name}")
    assert rush.content == (peers.files / name).read_bytes()
    assert_same_answer(rush, uvicorn)


@pytest.mark.parametrize("name", list(SIZES))
def test_head_and_ranges_match_uvicorn(peers: Peers, name: str) -> None:
    assert_same_answer(*peers.both("HEAD", f"/files/{name}"))
    for ranged in ("bytes=0-99", "bytes=100-", "bytes=-10"):
        rush, uvicorn = peers.both("GET", f"/files/{name}", {"Range": ranged})
        assert rush.status_code == 206
        assert_same_answer(rush, uvicorn)
    etag = peers.fetch(peers.rush, "HEAD", f"/files/{name}").headers["etag"]
    # A matching If-Range gets the range; a stale one the whole file
    # (which Starlette leaves to pathsend under rush: rush judges If-Range).
    for if_range, status in ((etag, 206), ('"stale"', 200)):
        rush, uvicorn = peers.both("GET", f"/files/{name}", {"Range": "bytes=0-9", "If-Range": if_range})
        assert rush.status_code == status
        assert_same_answer(rush, uvicorn)
    # Past the end: Starlette's own 416.
    assert_same_answer(*peers.both("GET", f"/files/{name}", {"Range": f"bytes={SIZES[name]}-"}))


def test_conditional_requests_use_starlettes_validators(peers: Peers) -> None:
    whole = peers.fetch(peers.rush, "GET", "/files/small.bin")
    for condition in (
        {"If-None-Match": whole.headers["etag"]},
        {"If-Modified-Since": whole.headers["last-modified"]},
    ):
        rush, uvicorn = peers.both("GET", "/files/small.bin", condition)
        assert (rush.status_code, rush.content) == (304, b"")
        assert rush.headers["etag"] == whole.headers["etag"]
        # The deliberate difference (module docstring).
        assert uvicorn.status_code == 200
    rush, uvicorn = peers.both("GET", "/files/small.bin", {"If-None-Match": '"other"'})
    assert rush.status_code == 200
    assert_same_answer(rush, uvicorn)


def test_rush_answers_range_and_conditions_for_a_raw_pathsend(peers: Peers) -> None:
    data = (peers.files / "large.bin").read_bytes()
    answer, sent = peers.sent_by_rush("GET", "/raw/large.bin", {"Range": "bytes=10-19"})
    assert sent == "http.response.start,http.response.pathsend"
    assert (answer.status_code, answer.content) == (206, data[10:20])
    assert answer.headers["content-range"] == f"bytes 10-19/{len(data)}"
    assert (answer.headers["etag"], answer.headers["x-app"]) == ('"raw-tag"', "raw")
    assert peers.fetch(peers.rush, "GET", "/raw/large.bin", {"If-None-Match": '"raw-tag"'}).status_code == 304
    # Another status sends the whole file under it, whatever the request asks.
    other = peers.fetch(peers.rush, "GET", "/raw-status/small.bin", {"Range": "bytes=0-9"})
    assert (other.status_code, other.content) == (404, (peers.files / "small.bin").read_bytes())


def test_a_missing_file_is_a_500_for_that_request_only(peers: Peers) -> None:
    with peers.rush.connect() as connection:
        connection.send(request("GET", "/vanished"))
        assert connection.read_response().status == 500
        # The connection and the worker go on.
        connection.send(request("GET", "/files/small.bin"))
        answer = connection.read_response()
    assert (answer.status, answer.body) == (200, (peers.files / "small.bin").read_bytes())
    peers.rush.wait_for_log(r"http\.response\.pathsend: cannot send .*no-such-file\.bin")


@pytest.mark.parametrize("name", list(SIZES))
def test_a_relative_path_is_read_from_the_working_directory(peers: Peers, name: str) -> None:
    """Before, rush refused the relative path in send() after the head had gone out: the client
    got a 200 with a Content-Length and then a closed connection."""
    rush, sent = peers.sent_by_rush("GET", f"/relative/{name}")
    assert sent == "http.response.start,http.response.pathsend"
    assert rush.content == (peers.files / name).read_bytes()
    assert_same_answer(rush, peers.fetch(peers.uvicorn, "GET", f"/relative/{name}"))
    over_http2 = peers.fetch(peers.rush, "GET", f"/relative/{name}", http2=True)
    assert over_http2.http_version == "HTTP/2"
    assert_same_answer(over_http2, rush)


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_a_relative_file_that_cannot_be_opened_is_a_500_before_the_head(peers: Peers, http2: bool) -> None:
    answer = peers.fetch(peers.rush, "GET", "/relative-vanished", http2=http2)
    assert (answer.status_code, answer.headers.get("content-length")) == (500, str(len(answer.content)))
    # The worker goes on.
    assert peers.fetch(peers.rush, "GET", "/relative/small.bin", http2=http2).status_code == 200


@pytest.mark.parametrize("http2", [False, True], ids=["http1", "http2"])
def test_a_conditional_post_gets_the_file_as_under_uvicorn(peers: Peers, http2: bool) -> None:
    """RFC 9110 13.1.2: a 304 answers a GET or HEAD only; Starlette does not evaluate If-None-Match
    for a POST, so uvicorn sends the whole file, and so does rush."""
    whole = peers.fetch(peers.rush, "GET", "/files/small.bin")
    for condition in (
        {"If-None-Match": whole.headers["etag"]},
        {"If-Modified-Since": whole.headers["last-modified"]},
    ):
        for path in ("/files/small.bin", "/relative/small.bin"):
            rush = peers.fetch(peers.rush, "POST", path, condition, http2=http2)
            assert rush.status_code == 200, (path, condition)
            assert_same_answer(rush, peers.fetch(peers.uvicorn, "POST", path, condition))


def test_a_raw_pathsend_answers_ranges_and_conditions_for_get_and_head_only(peers: Peers) -> None:
    data = (peers.files / "large.bin").read_bytes()
    for headers in ({"If-None-Match": '"raw-tag"'}, {"Range": "bytes=10-19"}):
        answer, sent = peers.sent_by_rush("POST", "/raw/large.bin", headers)
        assert sent == "http.response.start,http.response.pathsend"
        assert (answer.status_code, answer.content) == (200, data), headers
    assert peers.fetch(peers.rush, "HEAD", "/raw/large.bin", {"If-None-Match": '"raw-tag"'}).status_code == 304
