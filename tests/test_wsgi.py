"""WSGI (PEP 3333, issue 4) over real sockets: interface detection and its
startup log line, the natively built ``environ`` (every required key,
``HTTP_*`` with repeated fields comma-joined and underscore names dropped,
``CONTENT_TYPE``/``CONTENT_LENGTH`` without ``HTTP_`` twins, a percent-decoded
latin-1 ``PATH_INFO``, ``SCRIPT_NAME`` from ``--root-path``, client and server
addresses), ``wsgi.input`` (read whole, in pieces, by lines; Content-Length
and chunked bodies; several MiB), ``wsgi.errors``, ``start_response`` with
``exc_info`` and twice without it, the legacy ``write()``, ``close()`` always
called, ``wsgi.file_wrapper`` (sendfile, offsets, objects without a file
descriptor, descriptors released), app errors (Content-Length mismatches,
CR/LF in headers, no ``start_response``, exceptions) answered with a clean 500
and logged, ``--max-body-size``, ``--threads`` (a handler blocked on an event
does not hold up other requests of the same worker), and apps wrapped in
``wsgiref.validate.validator`` passing GET, HEAD, POST (Content-Length and
chunked), large bodies and file responses.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import (
    HTTPResponse,
    RushServer,
    ServerFactory,
    chunked,
    request,
    rss_kib,
    wait_for,
)

APP = "tests.apps.wsgi_apps:app"
MIB = 1024 * 1024


def fetch(
    server: RushServer,
    target: str,
    headers: list[tuple[str, str]] | None = None,
    method: str = "GET",
    body: bytes = b"",
) -> HTTPResponse:
    with server.connect() as connection:
        connection.send(request(method, target, headers, body))
        return connection.read_response(method)


def chunked_request(target: str, *pieces: bytes, close: bool = False) -> bytes:
    headers = [("Transfer-Encoding", "chunked")] + ([("Connection", "close")] if close else [])
    return request("POST", target, headers, chunked(*pieces), content_length=False)


def fetch_and_close(server: RushServer, raw: bytes) -> list[HTTPResponse]:
    """Sends raw request bytes (ending with a ``Connection: close`` request) and
    returns every response until the server closes; unparsed bytes fail the test."""
    with server.connect() as connection:
        connection.send(raw)
        result = connection.read_until_close()
    assert result.leftover == b"", f"malformed or truncated bytes on the wire: {result.leftover[:300]!r}"
    return result.responses


def environ_of(server: RushServer, target: str = "/environ", **options: object) -> dict:
    response = fetch(server, target, **options)  # type: ignore[arg-type]
    assert response.status == 200, response
    return response.json()


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory) -> RushServer:
    return module_servers(APP)


@pytest.fixture(scope="module")
def client(server: RushServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=15) as http:
        yield http


# ---------------------------------------------------------------------------
# Detection


def test_a_function_is_detected_as_wsgi_and_logged(server: RushServer) -> None:
    server.wait_for_log(r"serving tests\.apps\.wsgi_apps:app as a WSGI app")


@pytest.mark.parametrize("args", [(), ("--interface", "wsgi")])
def test_an_object_with_sync_call_is_wsgi(rush_server: ServerFactory, args: tuple[str, ...]) -> None:
    server = rush_server("tests.apps.wsgi_apps:instance_app", *args)
    server.wait_for_log(r"serving tests\.apps\.wsgi_apps:instance_app as a WSGI app")
    assert fetch(server, "/some/path").body == b"instance app at /some/path"


def test_interface_rush_refuses_a_wsgi_app(rush_server: ServerFactory) -> None:
    server = rush_server(APP, "--interface", "rush", wait=False, allow_worker_deaths=True)
    assert server.wait_exit() != 0
    assert "needs a rush.App" in server.stderr_text()


# ---------------------------------------------------------------------------
# environ


def test_required_environ_keys(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/environ/x?a=1&b=%20two"))
        environ = connection.read_response().json()
        client_port = connection.sock.getsockname()[1]
    assert environ["REQUEST_METHOD"] == "GET"
    assert environ["SCRIPT_NAME"] == ""
    assert environ["PATH_INFO"] == "/environ/x"
    assert environ["QUERY_STRING"] == "a=1&b=%20two"
    assert environ["SERVER_NAME"] == "127.0.0.1"
    assert environ["SERVER_PORT"] == str(server.port)
    assert environ["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert environ["REMOTE_ADDR"] == "127.0.0.1"
    assert environ["REMOTE_PORT"] == str(client_port)
    assert environ["HTTP_HOST"] == "test"
    assert environ["wsgi.version"] == [1, 0]
    assert environ["wsgi.url_scheme"] == "http"
    assert environ["wsgi.multithread"] is False
    assert environ["wsgi.multiprocess"] is False
    assert environ["wsgi.run_once"] is False
    assert environ["input_methods"] == ["read", "readline", "readlines", "__iter__"]
    assert environ["errors_methods"] == ["write", "writelines", "flush"]
    assert environ["file_wrapper_callable"] is True
    # Every CGI-style key is a str (PEP 3333's "native strings").
    for key, value in environ.items():
        if key.isupper():
            assert isinstance(value, str), key


def test_absolute_form_target_sets_http_host(server: RushServer) -> None:
    # RFC 9112 3.2.2: the target's authority is the host; the Host field is ignored.
    with server.connect() as connection:
        connection.send(b"GET http://other.example:8080/environ/x?a=1 HTTP/1.1\r\nHost: test\r\n\r\n")
        environ = connection.read_response().json()
    assert environ["HTTP_HOST"] == "other.example:8080"
    assert environ["PATH_INFO"] == "/environ/x"
    assert environ["QUERY_STRING"] == "a=1"


def test_environ_for_http10(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/environ", version="HTTP/1.0"))
        result = connection.read_until_close()
    assert result.responses[0].json()["SERVER_PROTOCOL"] == "HTTP/1.0"


def test_path_info_is_percent_decoded_latin1(server: RushServer) -> None:
    environ = environ_of(server, "/environ/caf%C3%A9%20x%2Fy?q=%C3%A9")
    # The UTF-8 bytes of "é", each as one latin-1 character (PEP 3333).
    assert environ["PATH_INFO"] == "/environ/caf\u00c3\u00a9 x/y"
    assert environ["PATH_INFO"].encode("latin-1").decode("utf-8") == "/environ/caf\u00e9 x/y"
    assert environ["QUERY_STRING"] == "q=%C3%A9"


def test_headers_become_http_keys(server: RushServer) -> None:
    headers = [
        ("X-Dup", "a"),
        ("User-Agent", "rush-tests"),
        ("X-Dup", "b"),
        ("x-lower-case", "Kept Case"),
        ("X-Real", "real"),
        ("X_Real", "spoofed"),
        ("X_Only_Underscore", "dropped"),
        ("Accept", "text/html"),
    ]
    environ = environ_of(server, headers=headers)
    assert [part.strip() for part in environ["HTTP_X_DUP"].split(",")] == ["a", "b"]
    assert environ["HTTP_USER_AGENT"] == "rush-tests"
    assert environ["HTTP_X_LOWER_CASE"] == "Kept Case"
    assert environ["HTTP_X_REAL"] == "real"
    assert "HTTP_X_ONLY_UNDERSCORE" not in environ
    assert environ["HTTP_ACCEPT"] == "text/html"


def test_repeated_identical_fields_are_joined_on_every_request(server: RushServer) -> None:
    """A field's value string is remembered from one request to the next:
    two fields with the same bytes (the same string) are still joined, and
    a later request's new value replaces the remembered one."""
    with server.connect() as connection:
        for values in [["same", "same"], ["same", "same"], ["other"], ["same", "x", "same"]]:
            headers = [("X-Twice", value) for value in values] + [("User-Agent", values[-1])]
            connection.send(request("GET", "/environ", headers))
            environ = connection.read_response().json()
            assert environ["HTTP_X_TWICE"] == ",".join(values)
            assert environ["HTTP_USER_AGENT"] == values[-1]


def test_content_type_and_length_have_no_http_twins(server: RushServer) -> None:
    environ = environ_of(server, method="POST", headers=[("Content-Type", "text/plain; charset=utf-8")], body=b"hello")
    assert environ["REQUEST_METHOD"] == "POST"
    assert environ["CONTENT_TYPE"] == "text/plain; charset=utf-8"
    assert environ["CONTENT_LENGTH"] == "5"
    assert "HTTP_CONTENT_TYPE" not in environ
    assert "HTTP_CONTENT_LENGTH" not in environ


def test_header_values_are_latin1(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"GET /environ HTTP/1.1\r\nHost: test\r\nX-Bytes: caf\xc3\xa9\r\n\r\n")
        environ = connection.read_response().json()
    assert environ["HTTP_X_BYTES"] == "caf\u00c3\u00a9"


@pytest.mark.parametrize(
    ("target", "script_name", "path_info"),
    [
        ("/prefix/environ", "/prefix", "/environ"),
        ("/prefix/environ/deeper?x=1", "/prefix", "/environ/deeper"),
        ("/prefix", "/prefix", ""),
        ("/prefix/", "/prefix", "/"),
    ],
)
def test_root_path_sets_script_name(rush_server: ServerFactory, target: str, script_name: str, path_info: str) -> None:
    server = rush_server(APP, "--root-path", "/prefix")
    response = fetch(server, target)
    described = response.json()
    assert described.get("SCRIPT_NAME", described.get("script_name")) == script_name
    assert described["path"] == path_info


def test_multithread_and_multiprocess_flags(rush_server: ServerFactory) -> None:
    server = rush_server(APP, "--threads", "2", "--workers", "2")
    environ = environ_of(server)
    assert environ["wsgi.multithread"] is True
    assert environ["wsgi.multiprocess"] is True


# ---------------------------------------------------------------------------
# wsgi.input and wsgi.errors


def test_body_with_content_length(client: httpx.Client) -> None:
    response = client.post("/echo", content=b"some body bytes", headers={"Content-Type": "application/x-test"})
    assert response.json() == {
        "length": 15,
        "sha256": hashlib.sha256(b"some body bytes").hexdigest(),
        "head": "some body bytes",
        "content_length": "15",
        "content_type": "application/x-test",
    }


def test_chunked_body(server: RushServer) -> None:
    body = b"chunk one|chunk two|" * 100
    raw = chunked_request("/echo", body[:7], body[7:1000], body[1000:])
    with server.connect() as connection:
        connection.send(raw)
        echoed = connection.read_response().json()
    assert echoed["length"] == len(body)
    assert echoed["sha256"] == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_bodies(server: RushServer, framing: str) -> None:
    body = os.urandom(MIB) * 4
    if framing == "chunked":
        pieces = [body[offset : offset + 300_000] for offset in range(0, len(body), 300_000)]
        raw = chunked_request("/echo", *pieces)
    else:
        raw = request("POST", "/echo", body=body)
    with server.connect() as connection:
        connection.send(raw)
        echoed = connection.read_response().json()
    assert echoed["length"] == len(body)
    assert echoed["sha256"] == hashlib.sha256(body).hexdigest()


def test_input_read_in_pieces_stops_at_the_body_length(client: httpx.Client) -> None:
    body = bytes(range(256)) * 40
    echoed = client.post("/echo", params={"size": "1000"}, content=body).json()
    assert echoed["pieces"] == [1000] * 10 + [240]
    assert echoed["after_end"] == ""
    assert echoed["sha256"] == hashlib.sha256(body).hexdigest()


def test_input_by_lines(client: httpx.Client) -> None:
    body = b"first line\nsecond line\nthird\nfourth"
    assert client.post("/lines", content=body).json() == ["first line\n", "sec", "ond line\n", "third\n", "fourth"]
    assert client.post("/lines-iter", content=body).json() == ["first line\n", "second line\n", "third\n", "fourth"]


def test_bodiless_requests_each_get_a_fresh_input(server: RushServer) -> None:
    """Requests without a body share one native empty reader: what one app
    does to it (reading, seeking, closing) must not reach the next request,
    with or without a body in between."""
    empty = {"readinto": 0, "read": "", "readline": "", "rest": "", "iterated": [], "readlines": [], "at_end": ""}
    with server.connect() as connection:
        for method, target, body in [
            ("GET", "/input?spoil=1", b""),
            ("GET", "/input", b""),
            ("POST", "/input?spoil=1", b"abcdefg\nsecond\nthird"),
            ("POST", "/input", b""),
            ("GET", "/input?spoil=1", b""),
            ("DELETE", "/input", b""),
        ]:
            connection.send(request(method, target, body=body))
            response = connection.read_response(method)
            assert response.status == 200, (method, target)
            expected = empty
            if body:
                expected = {**empty, "readinto": 4, "read": "efg", "readline": "\n", "rest": "second\nthird"}
            assert response.json() == expected, (method, target)


def test_wsgi_errors_goes_to_the_log(server: RushServer, client: httpx.Client) -> None:
    assert client.get("/errors", params={"marker": "m-5521"}).text == "written"
    server.wait_for_log(r"wsgi\.errors says m-5521")
    server.wait_for_log(r"second line m-5521-2")


def test_body_limit_applies(rush_server: ServerFactory) -> None:
    server = rush_server(APP, "--max-body-size", "1000")
    assert fetch(server, "/echo", method="POST", body=b"x" * 1000).json()["length"] == 1000
    refused = fetch_and_close(server, request("POST", "/echo", [("Connection", "close")], body=b"x" * 1001))
    assert [response.status for response in refused] == [413]
    refused = fetch_and_close(server, chunked_request("/echo", b"y" * 600, b"y" * 600, close=True))
    assert [response.status for response in refused] == [413]


# ---------------------------------------------------------------------------
# start_response, write(), iterables


def test_start_response_with_exc_info_replaces_the_response(server: RushServer) -> None:
    response = fetch(server, "/exc-info")
    assert response.status == 503
    assert response.header("x-replaced") == "yes"
    assert response.header("x-first") is None
    assert response.body == b"replaced by the exc_info response"


def test_start_response_twice_without_exc_info_is_a_500(server: RushServer) -> None:
    (response, after) = fetch_and_close(
        server, request("GET", "/twice") + request("GET", "/write", [("Connection", "close")])
    )
    assert response.status == 500
    assert b"should never be sent" not in response.body
    assert after.body == b"hello legacy world"
    server.wait_for_log("start_response called a second time")


@pytest.mark.parametrize("keep", ["start_response", "write"])
def test_a_kept_start_response_is_never_handed_to_a_later_request(server: RushServer, keep: str) -> None:
    """rush reuses a start_response no one held on to; one the app kept (or
    whose write() it kept) stays the app's: the next request gets its own,
    and calling the old one cannot touch the new response."""
    query = "?write=1" if keep == "write" else ""
    with server.connect() as connection:
        for _ in range(3):
            connection.send(request("GET", "/keep-start-response" + query))
            assert connection.read_response().body == b"kept"
            connection.send(request("GET", "/use-kept" + query))
            response = connection.read_response()
            assert response.status == 200
            assert b"X-Stolen" not in response.raw_head
            expected = "refused" if keep == "start_response" else "accepted"
            assert response.json() == {"same": False, "reused_call": expected}
            # A plain request in between: its start_response is the one reused.
            connection.send(request("GET", "/environ"))
            assert connection.read_response().status == 200


def test_legacy_write_callable(server: RushServer) -> None:
    response = fetch(server, "/write")
    assert response.status == 200
    assert response.body == b"hello legacy world"
    assert response.header("content-length") == str(len(b"hello legacy world"))


def test_close_is_called_on_the_iterable(server: RushServer, client: httpx.Client) -> None:
    assert client.get("/closing", params={"id": "ok"}).content == b"one two three"
    assert client.get("/closed", params={"id": "ok"}).json() == {"closes": 1}
    assert client.head("/closing", params={"id": "head"}).content == b""
    assert client.get("/closed", params={"id": "head"}).json() == {"closes": 1}


def test_close_is_called_when_iteration_fails(server: RushServer, client: httpx.Client) -> None:
    # The body is streamed: its head and first chunk are on the wire when the
    # iterable raises, so the only honest end is a closed connection without
    # the final chunk (a client must not take the body for complete).
    with server.connect() as connection:
        connection.send(request("GET", "/closing?id=failing&fail=1"))
        result = connection.read_until_close()
    assert result.responses == []
    assert result.leftover.startswith(b"HTTP/1.1 200 ")
    assert b"\r\n0\r\n\r\n" not in result.leftover
    assert client.get("/closed", params={"id": "failing"}).json() == {"closes": 1}
    server.wait_for_log("failing in the middle of the body")


def test_generator_bodies_and_head(server: RushServer) -> None:
    size = 3 * MIB + 5
    response = fetch(server, f"/big?size={size}")
    # A generator without a Content-Length is streamed, chunked.
    assert response.header("content-length") is None
    assert response.header("transfer-encoding") == "chunked"
    expected = (bytes(range(256)) * 256 * 49)[:size]
    assert response.body == expected
    with server.connect() as connection:
        connection.send(request("HEAD", "/big?size=1000") + request("GET", "/write"))
        head, after = connection.read_responses(2, ["HEAD", "GET"])
    assert head.status == 200
    assert head.body == b""
    assert after.body == b"hello legacy world"


@pytest.mark.parametrize("threads", [(), ("--threads", "2")])
def test_start_response_called_from_the_body_iterator(rush_server: ServerFactory, threads: tuple[str, ...]) -> None:
    # PEP 3333 lets the body call start_response when first iterated (a generator app, or
    # middleware written as one); found by the differential suite against gunicorn.
    server = rush_server("wsgi_apps", *threads)
    response = fetch(server, "/lazy-start")
    assert (response.status, response.body) == (200, b"lazy start")
    assert response.header("content-type") == "text/plain"


@pytest.mark.parametrize("threads", [(), ("--threads", "2")])
def test_exc_info_after_the_head_is_sent_reraises(rush_server: ServerFactory, threads: tuple[str, ...]) -> None:
    # PEP 3333: once the head is sent, start_response(..., exc_info) re-raises; the stream ends
    # cut short (no last chunk) instead of going on with what the app yields next, as gunicorn does.
    server = rush_server("wsgi_apps", *threads)
    with server.connect() as connection:
        connection.send(request("GET", "/exc-info-late"))
        result = connection.read_until_close()
    assert result.responses == []
    assert result.leftover.startswith(b"HTTP/1.1 200 ")
    assert result.leftover.endswith(b"\r\n\r\n6\r\nbegun \r\n"), result.leftover
    server.wait_for_log("failed after the head was sent")


def test_repeated_response_headers_are_kept(client: httpx.Client) -> None:
    response = client.get("/cookies")
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert response.headers["x-other"] == "z"


def test_response_header_values_are_latin1_on_the_wire(server: RushServer) -> None:
    response = fetch(server, "/latin1-header")
    assert response.status == 200
    assert b"\r\nX-Latin: caf\xe9 \xff\r\n" in response.raw_head


def test_response_header_beyond_latin1_is_a_500(server: RushServer) -> None:
    responses = fetch_and_close(server, request("GET", "/non-latin1-header", [("Connection", "close")]))
    assert [response.status for response in responses] == [500]
    assert b"X-Check" not in responses[0].raw_head


@pytest.mark.parametrize(
    ("status", "body"), [("201 Created", b"status"), ("204 No Content", b""), ("418 I'm a teapot", b"status")]
)
def test_status_lines(server: RushServer, status: str, body: bytes) -> None:
    response = fetch(server, "/status?code=" + urllib.parse.quote(status))
    assert response.status == int(status[:3])
    assert response.body == body


# ---------------------------------------------------------------------------
# App errors: a clean, logged 500, never a malformed response


@pytest.mark.parametrize(("declared", "actual"), [(10, 5), (3, 5), (0, 1), ("abc", 3), ("-1", 0)])
def test_content_length_mismatch_is_a_500(server: RushServer, declared: int | str, actual: int) -> None:
    responses = fetch_and_close(
        server,
        request("GET", f"/length?declared={declared}&actual={actual}")
        + request("GET", "/write", [("Connection", "close")]),
    )
    assert responses[0].status == 500
    assert b"xxx" not in responses[0].body
    # If the connection was kept, the next response is intact.
    assert all(response.body == b"hello legacy world" for response in responses[1:])
    server.wait_for_log(re.escape(f"GET /length?declared={declared}&actual={actual} "))


def test_matching_content_length_is_kept(server: RushServer) -> None:
    response = fetch(server, "/length?declared=5&actual=5")
    assert response.status == 200
    assert response.body == b"xxxxx"


@pytest.mark.parametrize("where", ["name", "value"])
def test_crlf_in_a_header_is_a_500(server: RushServer, where: str) -> None:
    responses = fetch_and_close(server, request("GET", f"/crlf?where={where}", [("Connection", "close")]))
    assert [response.status for response in responses] == [500]
    assert responses[0].header("x-injected") is None
    assert b"X-Injected" not in responses[0].raw_head
    server.wait_for_log(re.escape(f"GET /crlf?where={where} "))


def test_crlf_in_the_status_line_never_reaches_the_wire(server: RushServer) -> None:
    responses = fetch_and_close(server, request("GET", "/crlf?where=status", [("Connection", "close")]))
    assert len(responses) == 1
    assert responses[0].status in (200, 500)
    assert responses[0].header("x-injected") is None
    assert b"X-Injected" not in responses[0].raw_head


@pytest.mark.parametrize(
    ("target", "logged"),
    [("/no-start?n=1", "without calling start_response"), ("/raise?n=1", "RuntimeError: the app failed")],
)
def test_app_errors_are_a_logged_500(server: RushServer, target: str, logged: str) -> None:
    responses = fetch_and_close(server, request("GET", target) + request("GET", "/write", [("Connection", "close")]))
    assert responses[0].status == 500
    assert b"no start_response" not in responses[0].body
    assert all(response.body == b"hello legacy world" for response in responses[1:])
    server.wait_for_log(re.escape(f"GET {target} ") + r"[^\n]*\n(.*\n)*?.*" + re.escape(logged))


# ---------------------------------------------------------------------------
# wsgi.file_wrapper


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wsgi-files") / "data.bin"
    path.write_bytes(os.urandom(64 * 1024) * 40 + b"tail")  # 2.5 MiB and a bit
    return path


def file_target(path: Path, **extra: str) -> str:
    return "/file?" + urllib.parse.urlencode({"path": str(path), **extra})


def test_file_wrapper_sends_the_file(server: RushServer, data_file: Path) -> None:
    data = data_file.read_bytes()
    response = fetch(server, file_target(data_file))
    assert response.status == 200
    assert response.header("content-length") == str(len(data))
    assert hashlib.sha256(response.body).digest() == hashlib.sha256(data).digest()


def test_file_wrapper_from_the_current_position(server: RushServer, data_file: Path) -> None:
    data = data_file.read_bytes()
    response = fetch(server, file_target(data_file, offset="1000"))
    assert response.body == data[1000:]
    declared = fetch(server, file_target(data_file, offset="70000", declare="1"))
    assert declared.header("content-length") == str(len(data) - 70000)
    assert declared.body == data[70000:]


def test_file_wrapper_head_and_pipelining(server: RushServer, data_file: Path) -> None:
    data = data_file.read_bytes()
    with server.connect() as connection:
        connection.send(
            request("HEAD", file_target(data_file))
            + request("GET", file_target(data_file))
            + request("GET", "/write")
            + request("GET", file_target(data_file, offset=str(len(data) - 4)))
        )
        head, whole, write, tail = connection.read_responses(4, ["HEAD", "GET", "GET", "GET"])
    assert head.body == b"" and head.header("content-length") == str(len(data))
    assert whole.body == data
    assert write.body == b"hello legacy world"
    assert tail.body == b"tail"


def test_file_wrapper_is_sent_without_loading_the_file(rush_server: ServerFactory, tmp_path: Path) -> None:
    path = tmp_path / "large.bin"
    block = bytes(range(256)) * 4096
    expected = hashlib.sha256()
    with path.open("wb") as out:
        for index in range(48):
            chunk = index.to_bytes(4, "big") + block[4:]
            expected.update(chunk)
            out.write(chunk)
    size = 48 * MIB
    server = rush_server(APP)
    worker = server.single_worker()
    before = rss_kib(worker)
    with server.connect() as connection:
        connection.send(request("GET", file_target(path)))
        data = b""
        while b"\r\n\r\n" not in data:
            piece = connection.sock.recv(65536)
            assert piece, data
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        assert f"content-length: {size}".encode() in head.lower()
        digest = hashlib.sha256(body)
        received = len(body)
        buffer = bytearray(256 * 1024)
        checked = False
        while received < size:
            if not checked and received >= 8 * MIB:
                # Mid-transfer, the worker does not hold the file in memory: it goes out with sendfile.
                assert rss_kib(worker) - before < 24 * 1024
                checked = True
            count = connection.sock.recv_into(buffer, min(len(buffer), size - received))
            assert count, f"closed after {received} of {size} bytes"
            digest.update(memoryview(buffer)[:count])
            received += count
    assert checked
    assert digest.hexdigest() == expected.hexdigest()


def test_file_wrapper_without_a_descriptor(client: httpx.Client) -> None:
    assert client.get("/file-bytesio").content == b"from a BytesIO " * 1000


def test_file_wrapper_releases_its_file(server: RushServer, data_file: Path) -> None:
    (worker,) = server.wait_for_workers(1)
    for _ in range(5):
        fetch_and_close(server, request("GET", file_target(data_file), [("Connection", "close")]))

    def open_copies() -> int:
        count = 0
        for entry in os.listdir(f"/proc/{worker}/fd"):
            try:
                count += os.readlink(f"/proc/{worker}/fd/{entry}") == str(data_file)
            except OSError:
                continue
        return count

    wait_for(lambda: open_copies() == 0, "the worker to close every descriptor of the served file")


# ---------------------------------------------------------------------------
# --threads


@pytest.fixture(scope="module")
def threaded(module_servers: ServerFactory) -> RushServer:
    return module_servers(APP, "--threads", "4")


def wait_entered(server: RushServer, key: str) -> None:
    wait_for(lambda: fetch(server, f"/entered?key={key}").json()["entered"], f"/block?key={key} to start waiting")


def test_app_runs_on_pool_threads(threaded: RushServer) -> None:
    assert fetch(threaded, "/thread").body.startswith(b"rush-blocking")


def test_a_blocked_handler_does_not_hold_up_other_requests(threaded: RushServer) -> None:
    with threaded.connect() as blocked, threaded.connect() as neighbour:
        blocked.send(request("GET", "/block?key=t1"))
        wait_entered(threaded, "t1")
        # The worker keeps serving: other connections, kept-alive and new, pipelined too.
        for number in range(5):
            neighbour.send(request("GET", f"/environ?n={number}"))
            assert neighbour.read_response().json()["QUERY_STRING"] == f"n={number}"
            assert fetch(threaded, f"/environ?fresh={number}").status == 200
        neighbour.send(request("GET", "/write") + request("POST", "/echo", body=b"abc"))
        write, echo = neighbour.read_responses(2)
        assert write.body == b"hello legacy world"
        assert echo.json()["length"] == 3
        # Still waiting: nothing was sent on the blocked connection.
        assert blocked.nothing_arrives(0)
        assert fetch(threaded, "/release?key=t1").body == b"ok"
        assert blocked.read_response().body == b"released t1"


def test_several_blocked_handlers_and_pipelined_order(threaded: RushServer) -> None:
    with threaded.connect() as first, threaded.connect() as second:
        first.send(request("GET", "/block?key=t2") + request("GET", "/environ?after=t2"))
        second.send(request("GET", "/block?key=t3"))
        wait_entered(threaded, "t2")
        wait_entered(threaded, "t3")
        assert fetch(threaded, "/environ").status == 200
        fetch(threaded, "/release?key=t3")
        assert second.read_response().body == b"released t3"
        fetch(threaded, "/release?key=t2")
        blocked, after = first.read_responses(2)
    assert blocked.body == b"released t2"
    assert after.json()["QUERY_STRING"] == "after=t2"


def test_threads_with_errors_and_files(threaded: RushServer, data_file: Path) -> None:
    assert fetch(threaded, "/raise").status == 500
    assert fetch(threaded, "/exc-info").status == 503
    assert fetch(threaded, file_target(data_file)).body == data_file.read_bytes()
    assert fetch(threaded, "/length?declared=9&actual=2").status == 500
    assert fetch(threaded, "/write").body == b"hello legacy world"


# ---------------------------------------------------------------------------
# wsgiref.validate


@pytest.fixture(scope="module")
def validated(module_servers: ServerFactory) -> RushServer:
    return module_servers("tests.apps.wsgi_apps:validated")


def assert_validator_happy(server: RushServer) -> None:
    log = server.stderr_text()
    for sign in ("AssertionError", "WSGIWarning", "Exception ignored", "Traceback"):
        assert sign not in log, f"{sign} in the log:\n{log[-3000:]}"


def test_validated_get_and_head(validated: RushServer) -> None:
    get = fetch(validated, "/?x=1")
    assert get.status == 200
    assert get.body == b"hello from a validated app"
    head = fetch(validated, "/", method="HEAD")
    assert head.status == 200
    assert head.body == b""
    assert head.header("content-length") == str(len(b"hello from a validated app"))
    assert fetch(validated, "/iter").body == b"iterated"
    assert fetch(validated, "/missing").status == 404
    assert_validator_happy(validated)


@pytest.mark.parametrize("size", [0, 11, 3 * MIB + 1])
@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_validated_post_bodies(validated: RushServer, size: int, framing: str) -> None:
    body = os.urandom(size)
    if framing == "chunked":
        pieces = [body[offset : offset + 100_000] for offset in range(0, len(body), 100_000)]
        raw = chunked_request("/echo", *pieces)
    else:
        raw = request("POST", "/echo", body=body, content_length=True)
    with validated.connect() as connection:
        connection.send(raw)
        response = connection.read_response()
    assert response.status == 200, response
    echoed = response.json()
    assert echoed["length"] == size
    assert echoed["sha256"] == hashlib.sha256(body).hexdigest()
    if framing == "content-length":
        assert echoed["content_length"] == str(size)
    assert_validator_happy(validated)


def test_validated_readline(validated: RushServer) -> None:
    response = fetch(validated, "/lines", method="POST", body=b"one\ntwo\nthree\nfour")
    assert response.json() == ["one\n", "two\n", "three\n", "four"]
    assert_validator_happy(validated)


def test_validated_large_response_and_file(validated: RushServer, data_file: Path) -> None:
    big = fetch(validated, f"/big?size={4 * MIB}")
    assert big.body == b"v" * (4 * MIB)
    response = fetch(validated, "/file?" + urllib.parse.urlencode({"path": str(data_file)}))
    assert response.status == 200
    assert hashlib.sha256(response.body).digest() == hashlib.sha256(data_file.read_bytes()).digest()
    assert_validator_happy(validated)


def test_validated_with_threads_and_root_path(rush_server: ServerFactory, data_file: Path) -> None:
    server = rush_server("tests.apps.wsgi_apps:validated", "--threads", "2", "--root-path", "/mounted")
    assert fetch(server, "/mounted/").body == b"hello from a validated app"
    assert fetch(server, "/mounted/echo", method="POST", body=b"abc").json()["length"] == 3
    file_response = fetch(server, "/mounted/file?" + urllib.parse.urlencode({"path": str(data_file)}))
    assert file_response.body == data_file.read_bytes()
    assert_validator_happy(server)


def test_no_stray_bytes_after_validated_responses(validated: RushServer) -> None:
    raw = b"".join(request("GET", "/iter") for _ in range(5)) + request("GET", "/", [("Connection", "close")])
    with validated.connect() as connection:
        connection.send(raw)
        result = connection.read_until_close()
    # Each response parsed whole (the iterator's are streamed, chunked) with
    # nothing left over between or after them.
    assert [response.body for response in result.responses] == [b"iterated"] * 5 + [b"hello from a validated app"]
    assert result.leftover == b""
