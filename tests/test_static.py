"""Static files (issue 3) over real sockets: ``app.static`` mounts and the
``--static`` CLI flag (with and without an app, in front of WSGI and ASGI
apps), and ``Response.file`` from a handler.

Covered: content types, HEAD, 405 with ``Allow``, ``ETag``/``Last-Modified``
and 304 for ``If-None-Match`` (lists, ``W/``, ``*``) and
``If-Modified-Since``, single ranges (206), unsatisfiable ranges (416),
multiple ranges and ``If-Range`` mismatches (200), precompressed ``.br`` and
``.gz`` siblings with ``Vary: Accept-Encoding``, ``index.html`` and the
``/dir`` -> ``/dir/`` redirect, ``Cache-Control``, dotfiles, symlinks
inside and outside the mount, every traversal trick we know of, error bodies
without file-system paths, routes winning over mounts, both cache modes, and
inotify keeping the cache right on the very next request after a file is
modified in place, replaced by rename, deleted or created, and after
directories appear, move in or disappear. A 100 MiB file is sent completely
(length and SHA-256 checked) while another client's small requests keep being
answered.
"""

from __future__ import annotations

import email.utils
import gzip
import hashlib
import json
import os
import shutil
import socket
import urllib.parse
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest
from support import (
    GUARD_TIMEOUT,
    Gate,
    HTTPResponse,
    RushServer,
    ServerFactory,
    clean_environment,
    request,
    rss_kib,
)

SECRET = b"TOP-SECRET-OUTSIDE-THE-MOUNT"
NOTES = b"hello static world\n"
# 200 KiB: bigger than the server's inline limit (16 KiB), within the memory cache limit (1 MiB).
BIG = bytes(range(256)) * 800
BUNDLE = b"console.log('bundle');\n" * 20
BUNDLE_BR = b"pretend-brotli:" + BUNDLE[:40]
CACHE_CONTROL = "public, max-age=3600"
MIB = 1024 * 1024


# ---------------------------------------------------------------------------
# Helpers


def fetch(
    server: RushServer, target: str, headers: Iterable[tuple[str, str]] = (), method: str = "GET"
) -> HTTPResponse:
    """One request on a fresh connection (the raw target is sent as is)."""
    with server.connect() as connection:
        connection.send(request(method, target, headers))
        return connection.read_response(method)


def static_env(*mounts: tuple[str, Path, dict[str, object]]) -> dict[str, str]:
    spec = [
        {"prefix": prefix, "directory": str(directory), "options": options} for prefix, directory, options in mounts
    ]
    return clean_environment({"RUSHTEST_STATIC_MOUNTS": json.dumps(spec)})


def etag_of(path: Path) -> str:
    stat = path.stat()
    return f'"{int(stat.st_mtime):x}-{stat.st_size:x}"'


def http_date(path: Path) -> str:
    return email.utils.formatdate(int(path.stat().st_mtime), usegmt=True)


def assert_no_disclosure(response: HTTPResponse, *paths: Path) -> None:
    """Neither file contents from outside nor a file-system path in the answer."""
    raw = response.raw_head + response.body
    assert SECRET not in raw
    assert b"root:x:" not in raw
    for path in paths:
        assert str(path).encode() not in raw
    assert b"/tmp" not in raw


# ---------------------------------------------------------------------------
# The shared site


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``<base>/site`` (the mounted directory) and ``<base>/outside``."""
    base = tmp_path_factory.mktemp("static")
    site = base / "site"
    outside = base / "outside"
    for directory in (
        site,
        outside,
        site / "sub",
        site / "emptydir",
        site / "assets",
        site / ".hidden",
        site / "my dir",
    ):
        directory.mkdir()
    (outside / "secret.txt").write_bytes(SECRET)
    files = {
        "index.html": b"<!doctype html><h1>home</h1>\n",
        "style.css": b"body { color: red }\n",
        "app.js": b"console.log(1);\n",
        "data.json": b'{"a": 1}\n',
        "image.png": bytes(range(256)),
        "icon.svg": b"<svg xmlns='http://www.w3.org/2000/svg'/>\n",
        "notes.txt": NOTES,
        "blob.unknownext": b"\x00opaque\xff",
        "big.bin": BIG,
        "ping": b"the file named like the route",
        "with space.txt": b"spaced\n",
        "caf\u00e9.txt": b"accented\n",
        "bundle.js": BUNDLE,
        "bundle.js.br": BUNDLE_BR,
        "bundle.js.gz": gzip.compress(BUNDLE, mtime=0),
        "gzonly.css": b"p { margin: 0 }\n" * 10,
        "gzonly.css.gz": gzip.compress(b"p { margin: 0 }\n" * 10, mtime=0),
        ".env": b"PASSWORD=dotfile-secret\n",
        ".hidden/secret.txt": b"hidden-dir-secret\n",
        "sub/index.html": b"<h1>sub index</h1>\n",
        "my dir/index.html": b"<h1>spaced dir</h1>\n",
        "sub/page.txt": b"sub page\n",
        "assets/logo.txt": b"logo\n",
        "assets/route": b"the file named like the route",
    }
    for name, content in files.items():
        (site / name).write_bytes(content)
    (site / "link_inside.txt").symlink_to("notes.txt")
    (site / "sub" / "link_up.txt").symlink_to("../notes.txt")
    (site / "link_outside.txt").symlink_to(outside / "secret.txt")
    (site / "link_outside_relative.txt").symlink_to("../outside/secret.txt")
    (site / "linkdir_outside").symlink_to(outside)
    (site / "linkdir_inside").symlink_to("sub")
    return base


@pytest.fixture(scope="module")
def site(tree: Path) -> Path:
    return tree / "site"


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, site: Path) -> RushServer:
    env = static_env(
        ("/", site, {}),
        ("/fs", site, {"cache": "filesystem"}),
        # Everything over 8 bytes goes out with sendfile even in memory mode.
        ("/small", site, {"max_file_size": 8}),
        # A total budget smaller than most files.
        ("/budget", site, {"max_cache_size": 64}),
        ("/cc", site, {"cache_control": CACHE_CONTROL}),
        ("/dot", site, {"dotfiles": True}),
        ("/follow", site, {"allow_symlinks_outside": True}),
        ("/assets", site / "assets", {}),
    )
    return module_servers("static_site", env=env)


# Every way a file can go out: memory inline, memory shared (BIG), filesystem
# mode (sendfile), memory mode over the size limit (sendfile), over the budget.
PREFIXES = ["", "/fs", "/small", "/budget"]


# ---------------------------------------------------------------------------
# Basics


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("index.html", "text/html; charset=utf-8"),
        ("style.css", "text/css; charset=utf-8"),
        ("app.js", "text/javascript; charset=utf-8"),
        ("data.json", "application/json; charset=utf-8"),
        ("notes.txt", "text/plain; charset=utf-8"),
        ("icon.svg", "image/svg+xml; charset=utf-8"),
        ("image.png", "image/png"),
        ("blob.unknownext", "application/octet-stream"),
        ("big.bin", "application/octet-stream"),
    ],
)
def test_file_with_content_type_length_and_validators(
    server: RushServer, site: Path, prefix: str, name: str, content_type: str
) -> None:
    content = (site / name).read_bytes()
    response = fetch(server, f"{prefix}/{name}")
    assert response.status == 200
    assert response.body == content
    assert response.header("content-type") == content_type
    assert response.header("content-length") == str(len(content))
    assert response.header("etag") == etag_of(site / name)
    assert response.header("last-modified") == http_date(site / name)
    assert response.header("accept-ranges") == "bytes"
    assert response.header("cache-control") is None
    assert response.header("vary") is None
    assert response.header("content-encoding") is None


@pytest.mark.parametrize(
    ("target", "content"),
    [
        ("/with%20space.txt", b"spaced\n"),
        ("/caf%C3%A9.txt", b"accented\n"),
        ("/notes.txt?v=123", NOTES),
        ("//notes.txt", NOTES),
        ("/sub//page.txt", b"sub page\n"),
    ],
)
def test_encoded_names_queries_and_empty_segments(server: RushServer, target: str, content: bytes) -> None:
    response = fetch(server, target)
    assert response.status == 200
    assert response.body == content


@pytest.mark.parametrize("prefix", PREFIXES)
def test_head_has_the_headers_of_get_and_no_body(server: RushServer, site: Path, prefix: str) -> None:
    with server.connect() as connection:
        # HEAD, then GET on the same connection: a leaked body would corrupt the second response.
        connection.send(request("HEAD", f"{prefix}/big.bin") + request("GET", f"{prefix}/notes.txt"))
        head, get = connection.read_responses(2, ["HEAD", "GET"])
    assert head.status == 200
    assert head.header("content-length") == str(len(BIG))
    assert head.header("etag") == etag_of(site / "big.bin")
    assert head.header("content-type") == "application/octet-stream"
    assert head.body == b""
    assert get.status == 200
    assert get.body == NOTES


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize("target", ["/notes.txt", "/fs/notes.txt", "/missing.txt", "/sub/"])
def test_other_methods_get_405_with_allow(server: RushServer, method: str, target: str) -> None:
    response = fetch(server, target, method=method)
    assert response.status == 405
    assert response.header("allow") == "GET, HEAD"
    assert NOTES not in response.body


def test_missing_file_is_404(server: RushServer, site: Path) -> None:
    for target in ("/missing.txt", "/fs/missing.txt", "/sub/missing/deeper.txt", "/notes.txt/", "/emptydir/"):
        response = fetch(server, target)
        assert response.status == 404, target
        assert_no_disclosure(response, site)


def test_pipelined_static_responses_stay_in_order(server: RushServer) -> None:
    targets = ["/notes.txt", "/big.bin", "/fs/big.bin", "/missing", "/small/notes.txt", "/ping", "/notes.txt"]
    with server.connect() as connection:
        connection.send(b"".join(request("GET", target) for target in targets))
        responses = connection.read_responses(len(targets))
    assert [response.status for response in responses] == [200, 200, 200, 404, 200, 200, 200]
    assert [response.body for response in responses[:3]] == [NOTES, BIG, BIG]
    assert responses[4].body == NOTES
    assert responses[5].body == b"pong from a route"


def test_http10_request_gets_the_file_and_a_close(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/notes.txt", version="HTTP/1.0", host=None))
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200]
    assert result.responses[0].body == NOTES


# ---------------------------------------------------------------------------
# Routes and mounts


def test_routes_win_over_static_mounts(server: RushServer, site: Path) -> None:
    assert (site / "ping").exists() and (site / "assets" / "route").exists()
    assert fetch(server, "/ping").body == b"pong from a route"
    assert fetch(server, "/assets/route").body == b"the route wins"
    # The mount still answers what no route matched.
    assert fetch(server, "/assets/logo.txt").body == b"logo\n"


def test_longest_prefix_wins_and_prefixes_match_whole_segments(server: RushServer) -> None:
    assert fetch(server, "/assets/logo.txt").body == b"logo\n"
    # /assets is a mount of site/assets; through "/" the same file is site/assets/logo.txt.
    assert fetch(server, "/fs/assets/logo.txt").body == b"logo\n"
    # "/fsx" is not under the "/fs" mount: the "/" mount looks for site/fsx.
    assert fetch(server, "/fsx/notes.txt").status == 404


def test_mount_root_without_slash_redirects(server: RushServer) -> None:
    response = fetch(server, "/fs")
    assert response.status == 301
    assert response.header("location") == "/fs/"
    assert fetch(server, "/fs/").body == b"<!doctype html><h1>home</h1>\n"


# ---------------------------------------------------------------------------
# Directories


@pytest.mark.parametrize("prefix", ["", "/fs"])
def test_index_html_for_directories(server: RushServer, prefix: str) -> None:
    root = fetch(server, f"{prefix}/")
    assert root.status == 200
    assert root.body == b"<!doctype html><h1>home</h1>\n"
    assert root.header("content-type") == "text/html; charset=utf-8"
    sub = fetch(server, f"{prefix}/sub/")
    assert sub.status == 200
    assert sub.body == b"<h1>sub index</h1>\n"
    assert fetch(server, f"{prefix}/my%20dir/").body == b"<h1>spaced dir</h1>\n"


@pytest.mark.parametrize(
    ("target", "location"),
    [
        ("/sub", "/sub/"),
        ("/sub?x=1&y=%20", "/sub/?x=1&y=%20"),
        ("/fs/sub", "/fs/sub/"),
        ("/emptydir", "/emptydir/"),
        ("/linkdir_inside", "/linkdir_inside/"),
        ("/my%20dir", "/my%20dir/"),
        ("/my%20dir?next=%2Fa%20b", "/my%20dir/?next=%2Fa%20b"),
    ],
)
def test_directory_without_slash_redirects_keeping_the_query(server: RushServer, target: str, location: str) -> None:
    response = fetch(server, target)
    assert response.status == 301
    assert response.header("location") == location


def test_no_directory_listing(server: RushServer) -> None:
    response = fetch(server, "/emptydir/")
    assert response.status == 404
    assert b"index" not in response.body.lower()


def test_symlinked_directory_inside_the_mount_is_served(server: RushServer) -> None:
    assert fetch(server, "/linkdir_inside/page.txt").body == b"sub page\n"
    assert fetch(server, "/linkdir_inside/").body == b"<h1>sub index</h1>\n"


# ---------------------------------------------------------------------------
# Conditional requests


@pytest.mark.parametrize("prefix", PREFIXES)
def test_if_none_match(server: RushServer, site: Path, prefix: str) -> None:
    etag = etag_of(site / "notes.txt")
    matching = [etag, f'"nope", {etag}', f"W/{etag}", f'"a",W/{etag} , "b"', "*"]
    with server.connect() as connection:
        for value in matching:
            connection.send(request("GET", f"{prefix}/notes.txt", [("If-None-Match", value)]))
            response = connection.read_response()
            assert response.status == 304, value
            assert response.body == b""
            assert response.header("etag") == etag
            assert response.header("last-modified") == http_date(site / "notes.txt")
        for value in ['"nope"', '"a", "b"', etag[:-2] + '"']:
            connection.send(request("GET", f"{prefix}/notes.txt", [("If-None-Match", value)]))
            response = connection.read_response()
            assert response.status == 200, value
            assert response.body == NOTES
        # HEAD gets its 304 too.
        connection.send(request("HEAD", f"{prefix}/notes.txt", [("If-None-Match", etag)]))
        assert connection.read_response("HEAD").status == 304


@pytest.mark.parametrize("prefix", PREFIXES)
def test_if_modified_since(server: RushServer, site: Path, prefix: str) -> None:
    modified = int((site / "big.bin").stat().st_mtime)
    cases = [
        (email.utils.formatdate(modified, usegmt=True), 304),
        (email.utils.formatdate(modified + 3600, usegmt=True), 304),
        (email.utils.formatdate(modified - 1, usegmt=True), 200),
        (email.utils.formatdate(modified - 86400 * 365, usegmt=True), 200),
        ("not a date", 200),
    ]
    with server.connect() as connection:
        for value, status in cases:
            connection.send(request("GET", f"{prefix}/big.bin", [("If-Modified-Since", value)]))
            response = connection.read_response()
            assert response.status == status, value
            assert response.body == (b"" if status == 304 else BIG)
            assert response.header("etag") == etag_of(site / "big.bin")


def test_if_none_match_wins_over_if_modified_since(server: RushServer, site: Path) -> None:
    since = http_date(site / "notes.txt")
    response = fetch(server, "/notes.txt", [("If-None-Match", '"other"'), ("If-Modified-Since", since)])
    assert response.status == 200
    assert response.body == NOTES


# ---------------------------------------------------------------------------
# Ranges


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=0-9", 0, 10),
        ("bytes=100-", 100, len(BIG)),
        ("bytes=-7", len(BIG) - 7, len(BIG)),
        ("bytes=150000-150099", 150000, 150100),
        ("bytes=5-99999999", 5, len(BIG)),
        ("bytes=-999999999", 0, len(BIG)),
        ("bytes=0-0", 0, 1),
        (f"bytes={len(BIG) - 1}-", len(BIG) - 1, len(BIG)),
    ],
)
def test_single_range_is_206(server: RushServer, site: Path, prefix: str, header: str, start: int, end: int) -> None:
    response = fetch(server, f"{prefix}/big.bin", [("Range", header)])
    assert response.status == 206
    assert response.body == BIG[start:end]
    assert response.header("content-range") == f"bytes {start}-{end - 1}/{len(BIG)}"
    assert response.header("content-length") == str(end - start)
    assert response.header("etag") == etag_of(site / "big.bin")


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("header", [f"bytes={len(BIG)}-", f"bytes={len(BIG) + 10}-{len(BIG) + 20}", "bytes=-0"])
def test_unsatisfiable_range_is_416(server: RushServer, prefix: str, header: str) -> None:
    with server.connect() as connection:
        connection.send(request("GET", f"{prefix}/big.bin", [("Range", header)]) + request("GET", "/notes.txt"))
        refused, after = connection.read_responses(2)
    assert refused.status == 416
    assert refused.header("content-range") == f"bytes */{len(BIG)}"
    assert BIG[:100] not in refused.body
    # The connection stays usable.
    assert after.body == NOTES


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "bytes=0-9, 20-29", "bytes=9-1", "items=0-5", "bytes=abc"])
def test_multiple_or_invalid_ranges_get_the_whole_file(server: RushServer, prefix: str, header: str) -> None:
    response = fetch(server, f"{prefix}/big.bin", [("Range", header)])
    assert response.status == 200
    assert response.body == BIG
    assert response.header("content-range") is None


@pytest.mark.parametrize("prefix", PREFIXES)
def test_if_range(server: RushServer, site: Path, prefix: str) -> None:
    etag = etag_of(site / "big.bin")
    modified = int((site / "big.bin").stat().st_mtime)
    cases = [
        (etag, 206),
        (http_date(site / "big.bin"), 206),
        ('"some-other-tag"', 200),
        (f"W/{etag}", 200),  # If-Range needs a strong match.
        (email.utils.formatdate(modified - 10, usegmt=True), 200),
    ]
    with server.connect() as connection:
        for value, status in cases:
            connection.send(request("GET", f"{prefix}/big.bin", [("Range", "bytes=10-19"), ("If-Range", value)]))
            response = connection.read_response()
            assert response.status == status, value
            assert response.body == (BIG[10:20] if status == 206 else BIG)


def test_range_on_a_small_file_and_head(server: RushServer) -> None:
    response = fetch(server, "/notes.txt", [("Range", "bytes=6-11")])
    assert response.status == 206
    assert response.body == NOTES[6:12]
    head = fetch(server, "/notes.txt", [("Range", "bytes=6-11")], method="HEAD")
    assert head.status == 206
    assert head.header("content-length") == "6"
    assert head.header("content-range") == f"bytes 6-11/{len(NOTES)}"


# ---------------------------------------------------------------------------
# Precompressed siblings


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    ("accept", "encoding"),
    [
        ("br", "br"),
        ("gzip", "gzip"),
        ("gzip, deflate, br", "br"),
        ("br;q=0, gzip", "gzip"),
        ("gzip;q=0.5", "gzip"),
        ("*", "br"),
        ("identity", None),
        ("deflate", None),
        ("gzip;q=0, br;q=0", None),
        (None, None),
    ],
)
def test_accept_encoding_chooses_a_precompressed_sibling(
    server: RushServer, site: Path, prefix: str, accept: str | None, encoding: str | None
) -> None:
    headers = [("Accept-Encoding", accept)] if accept is not None else []
    response = fetch(server, f"{prefix}/bundle.js", headers)
    assert response.status == 200
    expected = {
        "br": (site / "bundle.js.br").read_bytes(),
        "gzip": (site / "bundle.js.gz").read_bytes(),
        None: BUNDLE,
    }[encoding]
    assert response.body == expected
    assert response.header("content-encoding") == encoding
    # The content type is the original file's, whatever the coding.
    assert response.header("content-type") == "text/javascript; charset=utf-8"
    assert response.header("vary") == "Accept-Encoding"
    if encoding == "gzip":
        assert gzip.decompress(response.body) == BUNDLE


def test_gzip_only_sibling(server: RushServer, site: Path) -> None:
    response = fetch(server, "/gzonly.css", [("Accept-Encoding", "br, gzip")])
    assert response.header("content-encoding") == "gzip"
    assert gzip.decompress(response.body) == (site / "gzonly.css").read_bytes()
    assert response.header("vary") == "Accept-Encoding"
    plain = fetch(server, "/gzonly.css", [("Accept-Encoding", "br")])
    assert plain.header("content-encoding") is None
    assert plain.body == (site / "gzonly.css").read_bytes()
    assert plain.header("vary") == "Accept-Encoding"


def test_variants_have_their_own_validators(server: RushServer) -> None:
    identity = fetch(server, "/bundle.js")
    br = fetch(server, "/bundle.js", [("Accept-Encoding", "br")])
    gz = fetch(server, "/bundle.js", [("Accept-Encoding", "gzip")])
    tags = {identity.header("etag"), br.header("etag"), gz.header("etag")}
    assert len(tags) == 3
    # Each variant's tag gives a 304 for that variant, with Vary.
    not_modified = fetch(server, "/bundle.js", [("Accept-Encoding", "br"), ("If-None-Match", br.header("etag") or "")])
    assert not_modified.status == 304
    assert not_modified.header("vary") == "Accept-Encoding"
    assert not_modified.header("etag") == br.header("etag")
    # The identity tag does not validate the br variant.
    changed = fetch(server, "/bundle.js", [("Accept-Encoding", "br"), ("If-None-Match", identity.header("etag") or "")])
    assert changed.status == 200
    assert changed.body == BUNDLE_BR


def test_range_of_a_compressed_variant(server: RushServer, site: Path) -> None:
    compressed = (site / "bundle.js.gz").read_bytes()
    response = fetch(server, "/bundle.js", [("Accept-Encoding", "gzip"), ("Range", "bytes=0-9")])
    assert response.status == 206
    assert response.body == compressed[:10]
    assert response.header("content-range") == f"bytes 0-9/{len(compressed)}"
    assert response.header("content-encoding") == "gzip"


# ---------------------------------------------------------------------------
# Cache-Control


def test_cache_control_only_when_configured(server: RushServer, site: Path) -> None:
    configured = fetch(server, "/cc/notes.txt")
    assert configured.header("cache-control") == CACHE_CONTROL
    assert configured.body == NOTES
    revalidated = fetch(server, "/cc/notes.txt", [("If-None-Match", etag_of(site / "notes.txt"))])
    assert revalidated.status == 304
    assert revalidated.header("cache-control") == CACHE_CONTROL
    assert fetch(server, "/cc/big.bin", [("Range", "bytes=0-1")]).header("cache-control") == CACHE_CONTROL
    for target in ("/notes.txt", "/fs/notes.txt", "/small/big.bin"):
        assert fetch(server, target).header("cache-control") is None


# ---------------------------------------------------------------------------
# Dotfiles, symlinks, traversal


@pytest.mark.parametrize(
    "target", ["/.env", "/.hidden/secret.txt", "/.hidden/", "/.hidden", "/%2eenv", "/fs/.env", "/sub/../.env"]
)
def test_dotfiles_are_hidden_by_default(server: RushServer, site: Path, target: str) -> None:
    response = fetch(server, target)
    assert response.status == 404
    assert b"dotfile-secret" not in response.body
    assert b"hidden-dir-secret" not in response.body
    assert_no_disclosure(response, site)


def test_dotfiles_when_enabled(server: RushServer) -> None:
    assert fetch(server, "/dot/.env").body == b"PASSWORD=dotfile-secret\n"
    assert fetch(server, "/dot/.hidden/secret.txt").body == b"hidden-dir-secret\n"


def test_symlinks_inside_the_mount_are_served(server: RushServer) -> None:
    assert fetch(server, "/link_inside.txt").body == NOTES
    assert fetch(server, "/sub/link_up.txt").body == NOTES
    assert fetch(server, "/fs/link_inside.txt").body == NOTES


@pytest.mark.parametrize("prefix", ["", "/fs", "/small", "/dot"])
@pytest.mark.parametrize(
    "name", ["link_outside.txt", "link_outside_relative.txt", "linkdir_outside/secret.txt", "sub/../link_outside.txt"]
)
def test_symlinks_leading_outside_are_403(server: RushServer, tree: Path, prefix: str, name: str) -> None:
    response = fetch(server, f"{prefix}/{name}")
    if "/../" in name:
        assert response.status == 404
    else:
        assert response.status == 403
    assert_no_disclosure(response, tree)


def test_symlinks_outside_when_allowed(server: RushServer) -> None:
    assert fetch(server, "/follow/link_outside.txt").body == SECRET
    assert fetch(server, "/follow/linkdir_outside/secret.txt").body == SECRET


TRAVERSALS = [
    "/../outside/secret.txt",
    "/../../../../../../../../etc/passwd",
    "/sub/../../outside/secret.txt",
    "/sub/./../../outside/secret.txt",
    "/./notes.txt",
    "/sub/..",
    "/sub/../notes.txt",
    "/%2e%2e/outside/secret.txt",
    "/%2E%2E/outside/secret.txt",
    "/.%2e/outside/secret.txt",
    "/%2e./outside/secret.txt",
    "/sub/%2e%2e/%2e%2e/outside/secret.txt",
    "/..%2foutside%2fsecret.txt",
    "/..%2Foutside%2Fsecret.txt",
    "/sub%2f..%2f..%2foutside%2fsecret.txt",
    "/%2e%2e%2foutside%2fsecret.txt",
    "/%2e%2e%2f%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/%2fetc%2fpasswd",
    "/..%5coutside%5csecret.txt",
    "/%2e%2e%5coutside%5csecret.txt",
    "/sub%5c..%5c..%5coutside%5csecret.txt",
    "/..\\outside\\secret.txt",
    "/sub\\..\\..\\outside\\secret.txt",
    "/notes.txt%00",
    "/notes.txt%00.png",
    "/%00../outside/secret.txt",
    "/%252e%252e/outside/secret.txt",
    "/%c0%ae%c0%ae/outside/secret.txt",
    "/%c0%af..%c0%afoutside/secret.txt",
    "/..;/outside/secret.txt",
]


@pytest.mark.parametrize("prefix", ["", "/fs", "/dot", "/follow", "/assets"])
@pytest.mark.parametrize("target", TRAVERSALS)
def test_traversal_attempts_are_404(server: RushServer, tree: Path, prefix: str, target: str) -> None:
    response = fetch(server, prefix + target)
    assert response.status == 404, response
    assert response.body == b"Not Found"
    assert_no_disclosure(response, tree)
    assert NOTES not in response.body


def test_error_bodies_never_show_paths(server: RushServer, tree: Path) -> None:
    answers = [
        fetch(server, "/missing.txt"),
        fetch(server, "/link_outside.txt"),
        fetch(server, "/notes.txt", method="DELETE"),
        fetch(server, "/big.bin", [("Range", "bytes=999999999-")]),
        fetch(server, "/download-missing"),
    ]
    assert [answer.status for answer in answers] == [404, 403, 405, 416, 500]
    for answer in answers:
        assert_no_disclosure(answer, tree)
        assert b"nonexistent" not in answer.body


# ---------------------------------------------------------------------------
# Response.file


def download(
    server: RushServer, path: Path, headers: Iterable[tuple[str, str]] = (), method: str = "GET", **query: str
):
    target = "/download?" + urllib.parse.urlencode({"path": str(path), **query})
    return fetch(server, target, headers, method)


def test_response_file_basics(server: RushServer, site: Path) -> None:
    response = download(server, site / "notes.txt")
    assert response.status == 200
    assert response.body == NOTES
    assert response.header("content-type") == "text/plain; charset=utf-8"
    assert response.header("content-length") == str(len(NOTES))
    assert response.header("etag") == etag_of(site / "notes.txt")
    assert response.header("last-modified") == http_date(site / "notes.txt")
    assert response.header("content-disposition") is None


def test_response_file_large_body(server: RushServer, site: Path) -> None:
    response = download(server, site / "big.bin")
    assert response.body == BIG
    head = download(server, site / "big.bin", method="HEAD")
    assert head.header("content-length") == str(len(BIG))
    assert head.body == b""


def test_response_file_download_name(server: RushServer, site: Path) -> None:
    response = download(server, site / "notes.txt", filename="report.txt")
    assert response.header("content-disposition") == 'attachment; filename="report.txt"'
    assert response.body == NOTES


@pytest.mark.parametrize("filename", ["r\u00e9sum\u00e9 2024.pdf", "\u6587\u4ef6.txt", 'quote"back\\slash.txt'])
def test_response_file_download_name_rfc6266(server: RushServer, site: Path, filename: str) -> None:
    response = download(server, site / "notes.txt", filename=filename)
    assert response.status == 200
    disposition = response.header("content-disposition") or ""
    assert disposition.startswith('attachment; filename="')
    fallback = disposition.split('filename="', 1)[1].split('"', 1)[0]
    assert fallback.isascii() and "\\" not in fallback
    encoded = disposition.split("filename*=", 1)[1]
    assert encoded.startswith("UTF-8''")
    assert urllib.parse.unquote(encoded[len("UTF-8''") :], encoding="utf-8") == filename
    assert response.body == NOTES


def test_response_file_content_type_and_headers(server: RushServer, site: Path) -> None:
    response = download(server, site / "notes.txt", content_type="application/x-custom", header="X-Extra:yes")
    assert response.header("content-type") == "application/x-custom"
    assert response.header("x-extra") == "yes"
    guessed = download(server, site / "image.png")
    assert guessed.header("content-type") == "image/png"


def test_response_file_conditional_and_ranges(server: RushServer, site: Path) -> None:
    etag = etag_of(site / "big.bin")
    not_modified = download(server, site / "big.bin", [("If-None-Match", etag)], filename="x.bin")
    assert not_modified.status == 304
    assert not_modified.body == b""
    assert not_modified.header("etag") == etag
    since = download(server, site / "big.bin", [("If-Modified-Since", http_date(site / "big.bin"))])
    assert since.status == 304
    ranged = download(server, site / "big.bin", [("Range", "bytes=1000-1999")])
    assert ranged.status == 206
    assert ranged.body == BIG[1000:2000]
    assert ranged.header("content-range") == f"bytes 1000-1999/{len(BIG)}"
    unsatisfiable = download(server, site / "big.bin", [("Range", "bytes=999999999-")])
    assert unsatisfiable.status == 416
    assert unsatisfiable.header("content-range") == f"bytes */{len(BIG)}"
    if_range = download(server, site / "big.bin", [("Range", "bytes=0-9"), ("If-Range", '"stale"')])
    assert if_range.status == 200
    assert if_range.body == BIG


def test_response_file_answers_conditions_and_ranges_to_get_and_head_only(server: RushServer, site: Path) -> None:
    """RFC 9110 13.1.2: a 304 answers a GET or HEAD only; 14.2: a range is defined for GET alone.
    A POST handler that returns a file sends it whole (as Starlette's FileResponse does under
    uvicorn, tests/test_pathsend.py)."""
    etag = etag_of(site / "big.bin")
    for headers in (
        [("If-None-Match", etag)],
        [("If-Modified-Since", http_date(site / "big.bin"))],
        [("Range", "bytes=1000-1999")],
    ):
        answer = download(server, site / "big.bin", headers, method="POST")
        assert (answer.status, answer.body) == (200, BIG), headers
    assert download(server, site / "big.bin", [("If-None-Match", etag)], method="HEAD").status == 304
    # Over HTTP/2 (cleartext, prior knowledge) as well.
    target = "/download?" + urllib.parse.urlencode({"path": str(site / "big.bin")})
    with httpx.Client(base_url=server.url, http1=False, http2=True, timeout=GUARD_TIMEOUT) as client:
        answer = client.post(target, headers={"If-None-Match": etag})
        assert (answer.http_version, answer.status_code, answer.content) == ("HTTP/2", 200, BIG)
        assert client.get(target, headers={"If-None-Match": etag}).status_code == 304


def test_response_file_missing_is_a_500_without_the_path(server: RushServer) -> None:
    response = fetch(server, "/download-missing")
    assert response.status == 500
    assert b"nonexistent" not in response.body
    # The server keeps serving.
    assert fetch(server, "/notes.txt").body == NOTES


# ---------------------------------------------------------------------------
# The CLI


def test_cli_static_without_an_app(rush_server: ServerFactory, site: Path) -> None:
    relative = os.path.relpath(site, Path(__file__).resolve().parent.parent)
    server = rush_server("", "--static", f"/={relative}")
    assert fetch(server, "/").body == b"<!doctype html><h1>home</h1>\n"
    assert fetch(server, "/notes.txt").body == NOTES
    assert fetch(server, "/missing").status == 404
    assert fetch(server, "/sub").header("location") == "/sub/"
    assert fetch(server, "/link_outside.txt").status == 403
    assert fetch(server, "/.env").status == 404
    assert fetch(server, "/notes.txt", method="POST").status == 405


@pytest.mark.parametrize("source", ["flag", "env"])
def test_static_cache_control_applies_to_cli_mounts(rush_server: ServerFactory, site: Path, source: str) -> None:
    value = "public, max-age=3600"
    if source == "flag":
        server = rush_server("", "--static", f"/={site}", "--static-cache-control", value)
    else:
        env = clean_environment({"RUSH_STATIC_CACHE_CONTROL": value})
        server = rush_server("", "--static", f"/={site}", env=env)
    assert fetch(server, "/notes.txt").header("cache-control") == value
    assert fetch(server, "/missing").header("cache-control") is None


def test_cli_static_is_repeatable_and_works_beside_an_app(rush_server: ServerFactory, site: Path) -> None:
    server = rush_server(
        "static_site",
        "--static",
        f"/one={site}",
        "--static",
        f"/two={site / 'sub'}",
        "--static-cache",
        "filesystem",
    )
    assert fetch(server, "/one/notes.txt").body == NOTES
    assert fetch(server, "/two/page.txt").body == b"sub page\n"
    assert fetch(server, "/two/").body == b"<h1>sub index</h1>\n"
    assert fetch(server, "/ping").body == b"pong from a route"
    # Nothing mounted at "/": the app's (native) 404.
    assert fetch(server, "/notes.txt").status == 404


@pytest.mark.parametrize(("app", "interface"), [("wsgi_apps", "wsgi"), ("asgi_apps", "asgi")])
def test_cli_static_in_front_of_wsgi_and_asgi_apps(
    rush_server: ServerFactory, site: Path, app: str, interface: str
) -> None:
    server = rush_server(f"tests.apps.{app}:app", "--static", f"/assets={site}")
    kind = "a WSGI" if interface == "wsgi" else "an ASGI"
    server.wait_for_log(f"serving tests.apps.{app}:app as {kind} app")
    assert fetch(server, "/assets/notes.txt").body == NOTES
    assert fetch(server, "/assets/big.bin", [("Range", "bytes=0-3")]).body == BIG[:4]
    assert fetch(server, "/assets/missing").status == 404
    # Everything else reaches the app.
    response = fetch(server, "/environ" if interface == "wsgi" else "/scope")
    assert response.status == 200
    assert response.json()["path"] == ("/environ" if interface == "wsgi" else "/scope")


# ---------------------------------------------------------------------------
# Changes on disk while serving (inotify)
#
# These tests ask over one kept-alive connection: a request on an open
# connection is read only when epoll reports it, which is after the inotify
# events queued before it. Requests on *new* connections can be accepted and
# served in a loop that never goes back to epoll (see
# test_change_seen_by_a_new_connection_accepted_in_the_same_loop_turn).


class KeptAlive:
    """Every request of a test on one connection."""

    def __init__(self, server: RushServer) -> None:
        self.connection = server.connect()

    def get(self, target: str, headers: Iterable[tuple[str, str]] = ()) -> HTTPResponse:
        self.connection.send(request("GET", target, headers))
        return self.connection.read_response()

    def body(self, target: str) -> tuple[int, bytes]:
        response = self.get(target)
        return response.status, response.body

    def close(self) -> None:
        self.connection.close()


@pytest.fixture(params=["memory", "filesystem", "asgi"])
def live(
    request: pytest.FixtureRequest, rush_server: ServerFactory, tmp_path: Path
) -> Iterator[tuple[KeptAlive, Path]]:
    """A server with ``--static /=<dir>`` (no app, in either cache mode; or in
    front of an ASGI app, so with the asyncio loop), a kept-alive client, and
    the served directory."""
    root = tmp_path / "live"
    root.mkdir()
    (root / "keep.txt").write_bytes(b"keep\n")
    if request.param == "asgi":
        server = rush_server("tests.apps.asgi_apps:app", "--static", f"/={root}")
    else:
        server = rush_server("", "--static", f"/={root}", "--static-cache", request.param)
    client = KeptAlive(server)
    assert client.body("/keep.txt") == (200, b"keep\n")
    yield client, root
    client.close()


def test_file_modified_in_place(live: tuple[KeptAlive, Path]) -> None:
    client, root = live
    page = root / "page.txt"
    page.write_bytes(b"version 1\n")
    first = client.get("/page.txt")
    assert first.body == b"version 1\n"
    assert client.body("/page.txt") == (200, b"version 1\n")  # now cached
    page.write_bytes(b"version 2, longer\n")
    second = client.get("/page.txt")
    assert second.body == b"version 2, longer\n"
    assert second.header("content-length") == str(len(b"version 2, longer\n"))
    assert second.header("etag") == etag_of(page) != first.header("etag")
    # Same size, new bytes, written over the old ones without truncating.
    with page.open("r+b") as handle:
        handle.write(b"VERSION 3")
    assert client.body("/page.txt") == (200, b"VERSION 3, longer\n")
    # Appended to.
    with page.open("ab") as handle:
        handle.write(b"appended\n")
    assert client.body("/page.txt") == (200, b"VERSION 3, longer\nappended\n")
    # Truncated to nothing.
    page.write_bytes(b"")
    empty = client.get("/page.txt")
    assert (empty.status, empty.body, empty.header("content-length")) == (200, b"", "0")


def test_file_replaced_by_rename(live: tuple[KeptAlive, Path], tmp_path: Path) -> None:
    client, root = live
    page = root / "page.txt"
    page.write_bytes(b"old content\n")
    assert client.body("/page.txt") == (200, b"old content\n")
    # The editor way: a temporary file beside it, then rename over it.
    temporary = root / ".page.txt.swp"
    temporary.write_bytes(b"new content from an editor\n")
    os.replace(temporary, page)
    response = client.get("/page.txt")
    assert response.body == b"new content from an editor\n"
    assert response.header("etag") == etag_of(page)
    # The deploy way: written elsewhere on the same file system, moved in.
    staged = tmp_path / "staged.txt"
    staged.write_bytes(b"deployed\n")
    os.replace(staged, page)
    assert client.body("/page.txt") == (200, b"deployed\n")
    # Same size as before, so only the rename itself can tell.
    temporary.write_bytes(b"DEPLOYED\n")
    os.replace(temporary, page)
    assert client.body("/page.txt") == (200, b"DEPLOYED\n")


def test_file_deleted_and_recreated(live: tuple[KeptAlive, Path]) -> None:
    client, root = live
    page = root / "page.txt"
    page.write_bytes(b"soon gone\n")
    assert client.body("/page.txt") == (200, b"soon gone\n")
    page.unlink()
    assert client.get("/page.txt").status == 404
    page.write_bytes(b"back\n")
    assert client.body("/page.txt") == (200, b"back\n")


def test_file_renamed_away(live: tuple[KeptAlive, Path]) -> None:
    client, root = live
    (root / "a.txt").write_bytes(b"moving\n")
    assert client.body("/a.txt") == (200, b"moving\n")
    assert client.get("/b.txt").status == 404
    os.rename(root / "a.txt", root / "b.txt")
    assert client.get("/a.txt").status == 404
    assert client.body("/b.txt") == (200, b"moving\n")


def test_file_created(live: tuple[KeptAlive, Path]) -> None:
    client, root = live
    assert client.get("/new.txt").status == 404
    assert client.get("/new.txt").status == 404  # the miss is cached too
    (root / "new.txt").write_bytes(b"created\n")
    assert client.body("/new.txt") == (200, b"created\n")


def test_new_subdirectory_with_files(live: tuple[KeptAlive, Path]) -> None:
    client, root = live
    assert client.get("/fresh/page.txt").status == 404
    assert client.get("/fresh").status == 404
    (root / "fresh").mkdir()
    (root / "fresh" / "page.txt").write_bytes(b"in a new directory\n")
    assert client.body("/fresh/page.txt") == (200, b"in a new directory\n")
    assert client.get("/fresh").header("location") == "/fresh/"
    assert client.get("/fresh/").status == 404
    # The new directory is watched too: changes inside it are seen.
    (root / "fresh" / "page.txt").write_bytes(b"changed in the new directory\n")
    assert client.body("/fresh/page.txt") == (200, b"changed in the new directory\n")
    (root / "fresh" / "index.html").write_bytes(b"<p>new index</p>")
    assert client.body("/fresh/") == (200, b"<p>new index</p>")
    # Nested directories created at once.
    (root / "a" / "b" / "c").mkdir(parents=True)
    (root / "a" / "b" / "c" / "deep.txt").write_bytes(b"deep\n")
    assert client.body("/a/b/c/deep.txt") == (200, b"deep\n")
    (root / "a" / "b" / "c" / "deep.txt").write_bytes(b"deeper\n")
    assert client.body("/a/b/c/deep.txt") == (200, b"deeper\n")


def test_directory_moved_in_and_removed(live: tuple[KeptAlive, Path], tmp_path: Path) -> None:
    client, root = live
    staged = tmp_path / "release"
    (staged / "css").mkdir(parents=True)
    (staged / "css" / "site.css").write_bytes(b"v1 {}\n")
    assert client.get("/release/css/site.css").status == 404
    os.rename(staged, root / "release")
    assert client.body("/release/css/site.css") == (200, b"v1 {}\n")
    # The moved-in tree is watched too.
    (root / "release" / "css" / "site.css").write_bytes(b"v2 {}\n")
    assert client.body("/release/css/site.css") == (200, b"v2 {}\n")
    shutil.rmtree(root / "release")
    assert client.get("/release/css/site.css").status == 404
    assert client.get("/release").status == 404


def test_file_grows_past_the_memory_limit_and_shrinks(live: tuple[KeptAlive, Path]) -> None:
    client, root = live
    page = root / "grows.bin"
    page.write_bytes(b"small")
    assert client.body("/grows.bin") == (200, b"small")
    large = os.urandom(1024) * 2048  # 2 MiB, over the default 1 MiB memory limit
    page.write_bytes(large)
    response = client.get("/grows.bin")
    assert response.header("content-length") == str(len(large))
    assert hashlib.sha256(response.body).digest() == hashlib.sha256(large).digest()
    ranged = client.get("/grows.bin", [("Range", "bytes=1048570-1048579")])
    assert ranged.body == large[1048570:1048580]
    page.write_bytes(b"small again")
    assert client.body("/grows.bin") == (200, b"small again")


def test_large_file_replaced_by_rename(live: tuple[KeptAlive, Path]) -> None:
    client, root = live
    first = b"A" * (3 * MIB)
    second = b"B" * (3 * MIB - 1)
    (root / "large.bin").write_bytes(first)
    assert client.body("/large.bin") == (200, first)
    (root / "large.tmp").write_bytes(second)
    os.replace(root / "large.tmp", root / "large.bin")
    response = client.get("/large.bin")
    assert response.header("content-length") == str(len(second))
    assert response.body == second


def test_file_swapped_for_a_symlink_leading_outside(live: tuple[KeptAlive, Path], tmp_path: Path) -> None:
    client, root = live
    secret = tmp_path / "outside-secret.txt"
    secret.write_bytes(SECRET)
    page = root / "page.txt"
    page.write_bytes(b"public\n")
    assert client.body("/page.txt") == (200, b"public\n")
    (root / "page.link").symlink_to(secret)
    os.replace(root / "page.link", page)
    response = client.get("/page.txt")
    assert response.status == 403
    assert SECRET not in response.body
    # A symlink that stays inside the mount is fine.
    (root / "target.txt").write_bytes(b"inside\n")
    (root / "page.link").symlink_to("target.txt")
    os.replace(root / "page.link", page)
    assert client.body("/page.txt") == (200, b"inside\n")


def test_changes_seen_by_every_worker(rush_server: ServerFactory, tmp_path: Path) -> None:
    root = tmp_path / "live"
    root.mkdir()
    page = root / "page.txt"
    page.write_bytes(b"before\n")
    server = rush_server("static_site", "--workers", "2", env=static_env(("/files", root, {})))
    server.wait_for_workers(2)
    # One connection per worker, for sure: while the first worker is held in
    # a handler, only the other one can accept the second connection.
    gate = Gate(tmp_path)
    held = KeptAlive(server)
    held.connection.send(request("GET", gate.target))
    first_pid = gate.wait_entered()
    other = KeptAlive(server)
    assert other.get("/pid").json()["pid"] != first_pid
    gate.release()
    assert held.connection.read_response().status == 200
    assert held.get("/pid").json()["pid"] == first_pid
    for client in (held, other):
        assert client.body("/files/page.txt") == (200, b"before\n")
        assert client.body("/files/page.txt") == (200, b"before\n")
    page.write_bytes(b"after!\n")
    for client in (held, other):
        assert client.body("/files/page.txt") == (200, b"after!\n")
        client.close()


@pytest.mark.parametrize("change", ["modified", "replaced", "deleted", "created"])
def test_change_seen_by_a_new_connection_accepted_in_the_same_loop_turn(
    rush_server: ServerFactory, tmp_path: Path, change: str
) -> None:
    root = tmp_path / "live"
    root.mkdir()
    page = root / "page.txt"
    if change != "created":
        page.write_bytes(b"before\n")
    server = rush_server("static_site", env=static_env(("/files", root, {})))
    expected_before = (200, b"before\n") if change != "created" else (404, b"Not Found")
    assert body_of(server, "/files/page.txt") == expected_before  # cached now
    first, second = Gate(tmp_path, "first"), Gate(tmp_path, "second")
    # Each connection is opened only when its request is sent at once, so the
    # server cannot accept it (and register it with epoll) before its request is there.
    with server.connect() as one:
        # 1. Hold the loop in a handler.
        one.send(request("GET", first.target))
        first.wait_entered()
        with server.connect() as two:
            # 2. Queue a second gated request: once the first is released, it is
            # accepted and served inside the accept loop, which it holds.
            two.send(request("GET", second.target))
            first.release()
            second.wait_entered()
            # 3. Change the file, then queue a request for it on a new connection.
            if change in ("modified", "created"):
                page.write_bytes(b"after, longer\n")
            elif change == "replaced":
                (root / "page.tmp").write_bytes(b"after, longer\n")
                os.replace(root / "page.tmp", page)
            else:
                page.unlink()
            with server.connect() as three:
                three.send(request("GET", "/files/page.txt"))
                second.release()
                assert one.read_response().status == 200
                assert two.read_response().status == 200
                response = three.read_response()
    expected = (404, b"Not Found") if change == "deleted" else (200, b"after, longer\n")
    assert (response.status, response.body) == expected


def body_of(server: RushServer, target: str) -> tuple[int, bytes]:
    response = fetch(server, target)
    return response.status, response.body


# ---------------------------------------------------------------------------
# A 100 MiB file while other clients are served


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """Reads a response head; returns it and the body bytes read past it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed during the head: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def test_100_mib_file_is_sent_completely_while_others_are_served(rush_server: ServerFactory, tmp_path: Path) -> None:
    root = tmp_path / "big"
    root.mkdir()
    (root / "small.txt").write_bytes(b"small\n")
    big = root / "huge.bin"
    expected = hashlib.sha256()
    block = bytes(range(256)) * 4096
    with big.open("wb") as out:
        for index in range(100):
            # Every MiB starts with its own number, so a misplaced chunk shows.
            chunk = index.to_bytes(4, "big") + block[4:]
            expected.update(chunk)
            out.write(chunk)
    size = 100 * MIB
    server = rush_server("", "--static", f"/={root}")
    worker = server.single_worker()
    rss_before = rss_kib(worker)

    with server.connect() as downloader, server.connect() as neighbour:
        downloader.sock.settimeout(GUARD_TIMEOUT)
        downloader.send(request("GET", "/huge.bin"))
        head, body_start = read_head(downloader.sock)
        assert head.startswith(b"HTTP/1.1 200")
        assert f"content-length: {size}".encode() in head.lower()
        digest = hashlib.sha256(body_start)
        received = len(body_start)
        buffer = bytearray(256 * 1024)
        checkpoints = [MIB, 10 * MIB, 30 * MIB, 50 * MIB, 70 * MIB, 85 * MIB]
        rounds = 0
        while received < size:
            if checkpoints and received >= checkpoints[0]:
                checkpoints.pop(0)
                rounds += 1
                # The download is still in progress (we have not read it all):
                # other requests, kept-alive and fresh, are answered meanwhile.
                for number in range(3):
                    neighbour.send(request("GET", "/small.txt"))
                    assert neighbour.read_response().body == b"small\n"
                    assert fetch(server, f"/small.txt?n={number}").body == b"small\n"
                    ranged = fetch(server, "/huge.bin", [("Range", f"bytes={received}-{received + 9}")])
                    assert ranged.status == 206
                    assert len(ranged.body) == 10
                if rounds == 3:
                    # Sent with sendfile: the worker never holds the file in memory.
                    assert rss_kib(worker) - rss_before < 40 * 1024
            count = downloader.sock.recv_into(buffer, min(len(buffer), size - received))
            assert count, f"connection closed after {received} of {size} bytes"
            digest.update(memoryview(buffer)[:count])
            received += count
        assert rounds == 6
        assert received == size
        assert digest.hexdigest() == expected.hexdigest()
        # The connection is still in a clean state: the next response follows.
        downloader.buffer = b""
        downloader.send(request("GET", "/small.txt"))
        assert downloader.read_response().body == b"small\n"


def test_response_file_of_a_few_mib(rush_server: ServerFactory, tmp_path: Path) -> None:
    data = os.urandom(64 * 1024) * 48  # 3 MiB
    path = tmp_path / "download.bin"
    path.write_bytes(data)
    server = rush_server("static_site")
    response = download(server, path, filename="download.bin")
    assert response.header("content-length") == str(len(data))
    assert hashlib.sha256(response.body).digest() == hashlib.sha256(data).digest()
    assert response.header("content-disposition") == 'attachment; filename="download.bin"'
