"""HTTP/2's remaining conformance items (issue 24), over real sockets with
real clients (httpx with ``http2=True``, the ``h2`` package for frame-level
checks).

* A response taken back after it was rendered (a static 404 the app's own
  404 page replaces, a failed render or a failed 404 page replaced by a 500)
  reaches an HTTP/2 client as the replacement, never as a reset stream, and
  the same as over HTTP/1.1. (``/bad-value`` is a guard only: a value that
  cannot be rendered fails before anything is sent, so it never reset.)
* The access log and the metrics name the protocol: the same request logs
  ``HTTP/2`` where HTTP/1.1 logs ``HTTP/1.1`` (status and length alike),
  ``rush_requests_total`` counts by ``protocol``, and a body refused with
  413 over HTTP/2 is a logged refusal as over HTTP/1.1.
* After a 413 the rest of the body is drained while it keeps coming, and the
  stream reset with NO_ERROR (RFC 9113 section 8.1) once the client stalls,
  so a client that stops sending does not hold it open; httpx and curl get
  the 413 for an upload far past the limit.
* nghttp (nghttp2-client) fetches a page and its 31 assets concurrently on
  one connection (one of them missing: the app's own 404), and one URL 50
  times at once; every status is checked, and the access log shows each
  request over HTTP/2.
* Chromium (headless) loads the same page over TLS from an ``--http auto``
  server: the scripts ran (the dumped DOM shows it) and the access log shows
  every asset fetched over HTTP/2. Skipped when chromium is missing (about
  300 MB: ``make test-browser`` installs it and runs this test)."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import httpx
import pytest
from support import (
    GUARD_TIMEOUT,
    RushServer,
    ServerFactory,
    clean_environment,
    free_port,
    headless_chromium,
    write_localhost_pki,
)

# Under the 64 KiB a client may send before the server's SETTINGS arrive.
MAX_BODY = 50_000


@pytest.fixture(scope="module")
def fallbacks(module_servers: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> RushServer:
    site = tmp_path_factory.mktemp("fallback-site")
    (site / "here.txt").write_text("a static file\n")
    return module_servers("h2_fallbacks", "--http", "auto", "--max-body-size", str(MAX_BODY), env=site_env(site))


def site_env(site: Path) -> dict[str, str]:
    return clean_environment({"RUSHTEST_STATIC_DIR": str(site)})


def fetch_both(server: RushServer, path: str) -> tuple[httpx.Response, httpx.Response]:
    """The same GET over HTTP/1.1 and over h2 (cleartext, prior knowledge)."""
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        http1 = client.get(path)
    with httpx.Client(base_url=server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT) as client:
        http2 = client.get(path)
    assert (http1.http_version, http2.http_version) == ("HTTP/1.1", "HTTP/2")
    return http1, http2


@pytest.mark.parametrize(
    ("path", "status", "page", "text"),
    [
        # The static 404 is rendered first, then replaced by the app's page.
        ("/static/missing.txt", 404, "app-404", "the app's own 404 for /static/missing.txt"),
        # That page raises: the app's 500 page replaces it in turn.
        ("/static/explode.txt", 500, "app-500", "the app's own 500 for /static/explode.txt"),
        # A handler's value that cannot be sent.
        ("/bad-value", 500, "app-500", "the app's own 500 for /bad-value"),
    ],
)
def test_a_replaced_answer_arrives_over_h2_as_over_http1(
    fallbacks: RushServer, path: str, status: int, page: str, text: str
) -> None:
    http1, http2 = fetch_both(fallbacks, path)
    for answer in (http1, http2):
        assert (answer.status_code, answer.headers.get("x-page"), answer.text) == (status, page, text)
    # Nothing of the first answer leaked into the head that went out.
    assert http2.headers.get_list("content-length") == [str(len(text))]
    fallbacks.assert_running(f"after {path}")


def test_the_replacement_is_the_streams_only_answer(fallbacks: RushServer) -> None:
    """Frame by frame: one HEADERS (the app's 404) and its DATA on the stream,
    no RST_STREAM, and the connection serves the next stream."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    with socket.create_connection(("127.0.0.1", fallbacks.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(connection.data_to_send())
        events: list[h2.events.Event] = []
        for stream, path in ((1, "/static/missing.txt"), (3, "/static/here.txt")):
            headers = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", path)]
            connection.send_headers(stream, headers, end_stream=True)
            sock.sendall(connection.data_to_send())
            ended = False
            while not ended:
                data = sock.recv(65536)
                assert data, "the server closed the connection"
                for event in connection.receive_data(data):
                    events.append(event)
                    ended |= isinstance(event, h2.events.StreamEnded | h2.events.StreamReset) and (
                        event.stream_id == stream
                    )
                sock.sendall(connection.data_to_send())
    resets = [event for event in events if isinstance(event, h2.events.StreamReset)]
    assert resets == []
    heads = [dict(event.headers) for event in events if isinstance(event, h2.events.ResponseReceived)]
    assert [(head[b":status"], head.get(b"x-page")) for head in heads] == [(b"404", b"app-404"), (b"200", None)]
    bodies = {1: b"", 3: b""}
    for event in events:
        if isinstance(event, h2.events.DataReceived):
            bodies[event.stream_id] += event.data
    assert bodies == {1: b"the app's own 404 for /static/missing.txt", 3: b"a static file\n"}


def scrape(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=GUARD_TIMEOUT).text
    return {
        name: float(value)
        for line in text.splitlines()
        if line and not line.startswith("#")
        for name, value in [line.rsplit(" ", 1)]
    }


def test_access_log_and_metrics_name_the_protocol(rush_server: ServerFactory, tmp_path: Path) -> None:
    metrics_port = free_port()
    server = rush_server(
        "h2_fallbacks",
        "--http",
        "auto",
        "--access-log",
        "--metrics",
        f"127.0.0.1:{metrics_port}",
        env=site_env(tmp_path),
    )
    # The start-up check's own requests are counted too: compare with a baseline.
    before = scrape(metrics_port)
    http1, http2 = fetch_both(server, "/hello?from=both")
    assert http1.text == http2.text == "hello"
    lines = server.wait_for_log(r'"GET /hello\?from=both (HTTP/[0-9.]+)" (\d+) (\d+)', count=2, stream="stdout")
    assert sorted(match.groups() for match in lines) == [("HTTP/1.1", "200", "5"), ("HTTP/2", "200", "5")]
    samples = scrape(metrics_port)

    def grew(name: str) -> float:
        return samples[name] - before.get(name, 0)

    assert grew('rush_requests_total{protocol="http/1.1"}') == 1
    assert grew('rush_requests_total{protocol="h2"}') == 1


def test_a_413_over_h2_is_a_logged_refusal_as_over_http1(rush_server: ServerFactory, tmp_path: Path) -> None:
    metrics_port = free_port()
    server = rush_server(
        "h2_fallbacks",
        "--http",
        "auto",
        "--max-body-size",
        "1000",
        "--metrics",
        f"127.0.0.1:{metrics_port}",
        env=site_env(tmp_path),
    )
    before = scrape(metrics_port)

    # A body past --max-body-size, sent without a length: refused with 413
    # and logged as a refusal over either protocol.
    def parts() -> Iterator[bytes]:
        yield b"x" * 600
        yield b"x" * 600

    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        assert client.post("/echo", content=parts()).status_code == 413
    with httpx.Client(base_url=server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT) as client:
        answer = client.post("/echo", content=parts())
        assert (answer.http_version, answer.status_code) == ("HTTP/2", 413)
    refusals = server.wait_for_log(r"refused a request from 127\.0\.0\.1:\d+: 413 request body too large", count=2)
    assert len(refusals) == 2
    refused = 'rush_requests_refused_total{status="413"}'
    assert scrape(metrics_port)[refused] - before[refused] == 2


def test_after_a_413_the_stream_is_reset_with_no_error(fallbacks: RushServer) -> None:
    """The client sends part of a body past the limit, then nothing more: the
    413 comes, then RST_STREAM(NO_ERROR) once the client stalled (rush drains
    a refused body only while it keeps coming), not at the idle timeout."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    with socket.create_connection(("127.0.0.1", fallbacks.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(connection.data_to_send())
        headers = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"), (":path", "/echo")]
        connection.send_headers(1, headers)
        # Past --max-body-size; the body never ends.
        for _ in range(4):
            connection.send_data(1, b"x" * 15_000)
        sock.sendall(connection.data_to_send())
        events: list[h2.events.Event] = []
        while not any(isinstance(event, h2.events.StreamReset | h2.events.ConnectionTerminated) for event in events):
            data = sock.recv(65536)
            assert data, "the server closed the connection"
            events += connection.receive_data(data)
            sock.sendall(connection.data_to_send())
    statuses = [dict(event.headers)[b":status"] for event in events if isinstance(event, h2.events.ResponseReceived)]
    assert statuses == [b"413"]
    assert any(isinstance(event, h2.events.StreamEnded) and event.stream_id == 1 for event in events)
    resets = [(event.stream_id, event.error_code) for event in events if isinstance(event, h2.events.StreamReset)]
    assert resets == [(1, h2.errors.ErrorCodes.NO_ERROR)]
    fallbacks.assert_running("after the 413")


def test_httpx_and_curl_take_the_413_and_reset_as_an_answer(fallbacks: RushServer, tmp_path: Path) -> None:
    # Far past the limit, so the client is still sending when the 413 comes
    # (the rest is drained: httpx fails an upload whose stream is reset).
    body = b"y" * (600 * 1024)
    with httpx.Client(base_url=fallbacks.url, http2=True, http1=False, timeout=GUARD_TIMEOUT) as client:
        answer = client.post("/echo", content=body)
        assert (answer.http_version, answer.status_code) == ("HTTP/2", 413)
        # The connection goes on.
        assert client.get("/hello").text == "hello"
    upload = tmp_path / "upload.bin"
    upload.write_bytes(body)
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "--max-time",
            str(GUARD_TIMEOUT),
            "--http2-prior-knowledge",
            "--data-binary",
            f"@{upload}",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{http_version}",
            f"{fallbacks.url}/echo",
        ],
        capture_output=True,
    )
    assert (done.returncode, done.stdout.decode(), done.stderr.decode()) == (0, "413 2", "")


ASSETS = [f"s{index}.css" for index in range(10)] + [f"j{index}.js" for index in range(10)]
ASSETS += [f"i{index}.png" for index in range(10)]
# A 1x1 PNG.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d4944415478da6364f8cf500f00038601805a347d6b0000000049454e44ae426082"
)


def write_page_with_assets(site: Path) -> None:
    """index.html linking 10 stylesheets, 10 scripts and 10 images (and one
    image that is missing)."""
    for index in range(10):
        (site / f"s{index}.css").write_text(f".c{index} {{ color: #{index}{index}{index}; }}\n")
        (site / f"j{index}.js").write_text(f'document.getElementById("page").dataset.ran{index} = "yes";\n')
        (site / f"i{index}.png").write_bytes(PIXEL)
    styles = "".join(f'<link rel="stylesheet" href="s{index}.css">' for index in range(10))
    scripts = "".join(f'<script src="j{index}.js"></script><img src="i{index}.png">' for index in range(10))
    (site / "index.html").write_text(
        f"<!doctype html><html><head>{styles}</head>"
        f'<body><p id="page">page</p>{scripts}<img src="gone.png"></body></html>'
    )


def nghttp_statuses(*args: str) -> list[tuple[int, str]]:
    """Runs ``nghttp -ns`` and returns (status, path) of every response from
    its statistics table."""
    done = subprocess.run(["nghttp", "-ns", "-t", str(int(GUARD_TIMEOUT)), *args], capture_output=True, timeout=60)
    output = done.stdout.decode()
    assert done.returncode == 0, output + done.stderr.decode()
    rows = re.findall(r"^\s*\d+\s+\S+\s+\S+\s+\S+\s+(\d+)\s+\d+\s+(\S+)$", output, re.M)
    return [(int(code), path) for code, path in rows]


def test_nghttp_fetches_a_page_and_its_assets_concurrently(rush_server: ServerFactory, tmp_path: Path) -> None:
    write_page_with_assets(tmp_path)
    server = rush_server("h2_fallbacks", "--http", "auto", "--access-log", env=site_env(tmp_path))
    found = nghttp_statuses("-a", f"{server.url}/static/index.html")
    expected = [(200, "/static/index.html")] + [(200, f"/static/{name}") for name in ASSETS]
    expected.append((404, "/static/gone.png"))
    assert sorted(found) == sorted(expected)
    # One URL, 50 streams at once on the one connection.
    assert nghttp_statuses("-m", "50", f"{server.url}/hello") == [(200, "/hello")] * 50
    # (The start-up readiness probe is the one HTTP/1.1 request.)
    pattern = r'"GET (/static/\S+|/hello) (HTTP/[0-9.]+)" (\d+)'
    logged = server.wait_for_log(pattern, count=len(expected) + 50, stream="stdout")
    assert {match.group(2) for match in logged} == {"HTTP/2"}
    assert sorted((int(match.group(3)), match.group(1)) for match in logged) == sorted(
        expected + [(200, "/hello")] * 50
    )
    server.assert_running("after nghttp")


def test_chromium_loads_a_page_with_many_assets_over_h2_and_tls(rush_server: ServerFactory, tmp_path: Path) -> None:
    command = headless_chromium(tmp_path / "profile", "--dump-dom")
    site = tmp_path / "site"
    site.mkdir()
    write_page_with_assets(site)
    pki = write_localhost_pki(tmp_path)
    tls = ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])]
    server = rush_server("h2_fallbacks", "--http", "auto", "--access-log", *tls, env=site_env(site))
    done = subprocess.run(
        [*command, f"https://127.0.0.1:{server.port}/static/index.html"],
        capture_output=True,
        timeout=120,
    )
    dom = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    # Every script was fetched and ran before the page's load was dumped.
    ran = re.search(r'<p id="page"([^>]*)>page</p>', dom)
    assert ran, dom[-3000:]
    assert sorted(re.findall(r'data-ran(\d)="yes"', ran.group(1))) == [str(index) for index in range(10)]
    expected = [(200, "/static/index.html")] + [(200, f"/static/{name}") for name in ASSETS]
    expected.append((404, "/static/gone.png"))
    logged = server.wait_for_log(r'"GET (/static/\S+) (HTTP/[0-9.]+)" (\d+)', count=len(expected), stream="stdout")
    assert sorted((int(match.group(3)), match.group(1), match.group(2)) for match in logged) == sorted(
        (status, path, "HTTP/2") for status, path in expected
    )
