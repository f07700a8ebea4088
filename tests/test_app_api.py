"""The rush App API as an HTTP client library (httpx) sees it: return types and
their content types, `Response`, path parameters (``{name}`` and
``{*rest}``), query and header multi-values, ``json()``, the request body,
``client`` and ``http_version``, redirects, native 404/405 (with Allow) and
custom error handlers, handler exceptions (500 for that request only, traceback
logged, connection reused), and async handlers that really suspend, keeping
pipelined responses in order.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import socket
import struct
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import RushServer, ServerFactory, chunked, clean_environment, request, wait_for


@pytest.fixture(scope="module")
def client(basic_server: RushServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=basic_server.url, timeout=15) as http:
        yield http


@pytest.fixture(scope="module")
def async_client(async_server: RushServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=async_server.url, timeout=15) as http:
        yield http


# ---------------------------------------------------------------------------
# Return values


@pytest.mark.parametrize(
    ("path", "status", "content_type", "body"),
    [
        ("/", 200, "text/plain; charset=utf-8", b"Hello, World!"),
        ("/text", 200, "text/plain; charset=utf-8", "h\u00e9llo \u2713".encode()),
        ("/bytes", 200, "application/octet-stream", b"\x00\x01\xffbinary"),
        ("/response", 201, "text/x-custom", b"created"),
        ("/response-text", 202, "text/plain; charset=utf-8", b"plain text"),
        ("/teapot", 418, "application/json", b'{"tea": true}'),
    ],
)
def test_return_types_and_content_types(
    client: httpx.Client, path: str, status: int, content_type: str, body: bytes
) -> None:
    response = client.get(path)
    assert response.status_code == status
    assert response.headers["content-type"] == content_type
    assert response.content == body
    assert response.headers["content-length"] == str(len(body))


@pytest.mark.parametrize(
    ("path", "value"),
    [("/json", {"message": "h\u00e9llo", "number": 1, "nested": {"list": [1, 2]}}), ("/list", [1, "two", None, True])],
)
def test_dict_and_list_become_json(client: httpx.Client, path: str, value: object) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.json() == value


def test_response_headers_from_a_dict(client: httpx.Client) -> None:
    assert client.get("/response").headers["x-custom"] == "yes"


def test_response_headers_from_pairs_keep_repeated_names(client: httpx.Client) -> None:
    response = client.get("/response-pairs")
    assert response.headers.get_list("set-cookie") == ["a=1", "b=2"]
    assert response.headers["x-other"] == "z"
    assert response.content == b"pairs"


def test_204_has_no_body_and_no_content_length(client: httpx.Client) -> None:
    response = client.get("/no-content")
    assert response.status_code == 204
    assert response.content == b""
    assert "content-length" not in response.headers


def test_large_response_body(client: httpx.Client) -> None:
    response = client.get("/big", params={"size": 5 * 1024 * 1024 + 3})
    assert len(response.content) == 5 * 1024 * 1024 + 3
    assert response.content.count(b"x") == len(response.content)


def test_head_on_a_get_route(client: httpx.Client) -> None:
    response = client.head("/json")
    assert response.status_code == 200
    assert response.content == b""
    assert int(response.headers["content-length"]) == len(client.get("/json").content)


# ---------------------------------------------------------------------------
# Routing


def test_path_parameter(client: httpx.Client) -> None:
    assert client.get("/users/42").json() == {"id": "42", "method": "GET"}
    assert client.put("/users/ada").json() == {"id": "ada", "method": "PUT"}


def test_two_path_parameters(client: httpx.Client) -> None:
    assert client.get("/users/7/posts/99").json() == {"user": "7", "post": "99"}


def test_catch_all_parameter_takes_the_rest_of_the_path(client: httpx.Client) -> None:
    echo = client.get("/echo/a/b/c.txt").json()
    assert echo["params"] == {"rest": "a/b/c.txt"}
    assert echo["path"] == "/echo/a/b/c.txt"


def test_path_is_percent_decoded_and_raw_path_is_not(client: httpx.Client) -> None:
    echo = client.get("/echo/caf%C3%A9%20au%20lait").json()
    assert echo["path"] == "/echo/caf\u00e9 au lait"
    assert echo["raw_path"] == "/echo/caf%C3%A9%20au%20lait"
    assert echo["params"] == {"rest": "caf\u00e9 au lait"}


def test_unknown_path_is_a_native_404(client: httpx.Client) -> None:
    response = client.get("/no/such/path")
    assert response.status_code == 404
    assert response.text == "Not Found"


def test_wrong_method_is_a_405_with_allow(client: httpx.Client) -> None:
    response = client.delete("/users/42")
    assert response.status_code == 405
    allowed = {method.strip() for method in response.headers["allow"].split(",")}
    assert {"GET", "PUT"} <= allowed
    assert "DELETE" not in allowed
    assert response.text == "Method Not Allowed"


def test_post_route_refuses_get(client: httpx.Client) -> None:
    response = client.get("/json-body")
    assert response.status_code == 405
    assert "POST" in response.headers["allow"]


def test_redirect(client: httpx.Client) -> None:
    response = client.get("/easter")
    assert response.status_code == 301
    assert response.headers["location"] == "/egg"
    assert response.content == b""
    followed = client.get("/easter", follow_redirects=True)
    assert (followed.status_code, followed.text) == (200, "You found it.")


def test_redirect_defaults_to_302(client: httpx.Client) -> None:
    response = client.get("/old")
    assert (response.status_code, response.headers["location"]) == (302, "/new")


def test_redirect_answers_any_method(client: httpx.Client) -> None:
    assert client.post("/easter", content=b"x").status_code == 301


# ---------------------------------------------------------------------------
# The request


def test_query_multi_values(client: httpx.Client) -> None:
    response = client.get("/inspect?a=1&b=x+y&a=2&c=%26%3D&empty=&flag")
    seen = response.json()
    assert seen["query_get"] == "1"
    assert seen["query_getlist"] == ["1", "2"]
    assert seen["query_item"] == "1"
    assert seen["query_get_default"] == "fallback"
    assert seen["query_keys"] == ["a", "b", "c", "empty", "flag"]
    assert seen["query_len"] == 5
    echo = client.get("/echo?a=1&b=x+y&a=2&c=%26%3D&empty=&flag").json()
    assert echo["query"] == [["a", "1"], ["b", "x y"], ["a", "2"], ["c", "&="], ["empty", ""], ["flag", ""]]
    assert echo["query_string"] == "a=1&b=x+y&a=2&c=%26%3D&empty=&flag"


def test_no_query(client: httpx.Client) -> None:
    seen = client.get("/inspect").json()
    assert (seen["query_get"], seen["query_getlist"], seen["query_len"]) == (None, [], 0)
    assert client.get("/echo").json()["query_string"] == ""


def test_headers_are_case_insensitive_and_multi_valued(client: httpx.Client) -> None:
    response = client.get("/inspect", headers=[("X-Multi", "one"), ("x-multi", "two"), ("X-MULTI", "three")])
    seen = response.json()
    assert seen["header_get"] == "one"
    assert seen["header_getlist"] == ["one", "two", "three"]
    assert seen["header_item"] == "one"
    assert seen["header_missing"] is None
    assert seen["has_host"] is True


def test_header_values_are_trimmed_and_keep_their_bytes(basic_server: RushServer) -> None:
    with basic_server.connect() as connection:
        connection.send(b"GET /echo HTTP/1.1\r\nHost: test\r\nX-Space:   a b \t\r\nX-Latin: caf\xe9\r\n\r\n")
        headers = connection.read_response().json()["headers"]
    assert ["X-Space", "a b"] in headers
    assert ["X-Latin", "caf\u00e9"] in headers  # latin-1: one character per byte


def test_json_body(client: httpx.Client) -> None:
    payload = {"name": "rush", "fast": True, "list": [1, 2.5, None], "unicode": "\u2713"}
    assert client.post("/json-body", json=payload).json() == {"received": payload}


def test_invalid_json_body_is_a_500(client: httpx.Client, basic_server: RushServer) -> None:
    response = client.post("/json-body", content=b"{not json")
    assert response.status_code == 500
    basic_server.wait_for_log(r"JSONDecodeError")


def test_binary_request_body(client: httpx.Client) -> None:
    body = bytes(range(256)) * 40
    echo = client.post("/echo", content=body).json()
    assert echo["body_length"] == len(body)
    assert echo["body"].encode("latin-1") == body


def test_large_request_body(client: httpx.Client) -> None:
    body = b"0123456789abcdef" * 65536  # 1 MiB, several reads
    echo = client.put("/echo", content=body).json()
    assert echo["body_length"] == len(body)
    assert echo["method"] == "PUT"


def test_chunked_request_body_from_a_generator(client: httpx.Client) -> None:
    def pieces() -> Iterator[bytes]:
        yield b"first "
        yield b"second"

    echo = client.post("/echo", content=pieces()).json()
    assert ("Transfer-Encoding", "chunked") in [tuple(pair) for pair in echo["headers"]]
    assert echo["body"] == "first second"


def test_method_and_http_version(client: httpx.Client) -> None:
    for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        echo = client.request(method, "/echo").json()
        assert echo["method"] == method
        assert echo["http_version"] == "1.1"


def test_client_address(basic_server: RushServer) -> None:
    with basic_server.connect() as connection:
        connection.send(request("GET", "/echo"))
        echo = connection.read_response().json()
        assert echo["client"] == list(connection.sock.getsockname())


def test_http_version_10(basic_server: RushServer) -> None:
    with basic_server.connect() as connection:
        connection.send(b"GET /echo HTTP/1.0\r\n\r\n")
        assert connection.read_until_close().responses[0].json()["http_version"] == "1.0"


# ---------------------------------------------------------------------------
# Errors in handlers


def test_handler_exception_is_a_500_and_the_connection_lives_on(basic_server: RushServer) -> None:
    with basic_server.connect() as connection:
        connection.send(request("GET", "/raise") + request("GET", "/echo?id=after"))
        failed, after = connection.read_responses(2)
        assert failed.status == 500
        assert not failed.closes
        assert after.status == 200
        connection.send(request("GET", "/"))
        assert connection.read_response().body == b"Hello, World!"
    basic_server.wait_for_log(r"Traceback \(most recent call last\)")
    basic_server.wait_for_log(r"RuntimeError: boom from /raise")


def test_handler_exception_keeps_the_httpx_connection(client: httpx.Client, basic_server: RushServer) -> None:
    assert client.get("/raise").status_code == 500
    assert client.get("/").text == "Hello, World!"
    with basic_server.connect() as connection:
        connection.send(request("GET", "/pid"))
        assert int(connection.read_response().body) == basic_server.single_worker()  # same worker, still alive


def test_unsupported_return_value_is_a_500_with_a_logged_reason(client: httpx.Client, basic_server: RushServer) -> None:
    assert client.get("/bad-return").status_code == 500
    basic_server.wait_for_log(r"handler returned int")


def test_response_header_with_crlf_cannot_split_the_response(basic_server: RushServer) -> None:
    with basic_server.connect() as connection:
        connection.send(request("GET", "/bad-header") + request("GET", "/"))
        bad, after = connection.read_responses(2)
    assert bad.status == 500
    assert bad.header("injected") is None
    assert after.body == b"Hello, World!"


def test_handler_asking_to_close(basic_server: RushServer) -> None:
    with basic_server.connect() as connection:
        connection.send(request("GET", "/close") + request("GET", "/"))
        result = connection.read_until_close()
    assert [(response.status, response.body) for response in result.responses] == [(200, b"bye")]
    assert result.responses[0].closes


# ---------------------------------------------------------------------------
# Custom error handlers


@pytest.fixture(scope="module")
def errors_server(module_servers: ServerFactory) -> RushServer:
    return module_servers("custom_errors")


def test_custom_404_handler_keeps_the_status(errors_server: RushServer) -> None:
    response = httpx.get(errors_server.url + "/missing%20thing", timeout=15)
    assert response.status_code == 404
    assert response.text == "nothing at /missing thing"


def test_custom_405_handler(errors_server: RushServer) -> None:
    response = httpx.post(errors_server.url + "/only-get", timeout=15)
    assert response.status_code == 405
    assert response.text == "POST is not allowed here"
    assert response.headers["x-handler"] == "custom"
    assert httpx.get(errors_server.url + "/only-get", timeout=15).text == "got it"


def test_custom_405_handler_response_still_has_allow(errors_server: RushServer) -> None:
    response = httpx.post(errors_server.url + "/only-get", timeout=15)
    assert response.status_code == 405
    assert "GET" in response.headers.get("allow", "")


def test_custom_404_handler_answers_head_without_a_body(errors_server: RushServer) -> None:
    with errors_server.connect() as connection:
        connection.send(request("HEAD", "/missing") + request("GET", "/missing"))
        head, get = connection.read_responses(2, ["HEAD", "GET"])
    assert (head.status, head.body) == (404, b"")
    assert head.header("content-length") == str(len(get.body))
    assert get.body == b"nothing at /missing"


def test_error_handler_that_raises_is_a_500_and_the_connection_lives_on(errors_server: RushServer) -> None:
    with errors_server.connect() as connection:
        connection.send(request("GET", "/explode") + request("GET", "/only-get"))
        failed, after = connection.read_responses(2)
    assert failed.status == 500
    assert after.body == b"got it"
    errors_server.wait_for_log("the 404 handler failed on purpose")


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        ("/raise", "a handler failed, for the 500 handler"),
        ("/raise-async", "an async handler failed, for the 500 handler"),
    ],
)
def test_custom_500_handler(errors_server: RushServer, path: str, logged: str) -> None:
    with errors_server.connect() as connection:
        connection.send(request("GET", path) + request("GET", "/only-get"))
        failed, after = connection.read_responses(2)
    assert (failed.status, failed.body) == (500, f"custom 500 for {path}".encode())
    assert after.body == b"got it"
    errors_server.wait_for_log(f"RuntimeError: {logged}")  # the traceback is still logged


def test_custom_500_handler_that_raises_falls_back_to_the_native_500(errors_server: RushServer) -> None:
    with errors_server.connect() as connection:
        connection.send(request("GET", "/raise-in-500") + request("GET", "/only-get"))
        failed, after = connection.read_responses(2)
    assert (failed.status, failed.body) == (500, b"Internal Server Error")
    assert after.body == b"got it"
    errors_server.wait_for_log("the 500 handler failed too")


# ---------------------------------------------------------------------------
# Async handlers


def test_async_handlers_really_suspend(async_server: RushServer) -> None:
    """A handler waiting on an asyncio.Event is released by a request on
    another connection: only possible if the first one truly suspended."""
    with async_server.connect() as waiting, async_server.connect() as releasing:
        waiting.send(request("GET", "/wait/interleave"))
        releasing.send(request("GET", "/release/interleave"))
        assert releasing.read_response().text == "released interleave"
        assert waiting.read_response().json() == {"key": "interleave", "waited": True}


def test_pipelined_requests_behind_a_suspended_handler_keep_their_order(async_server: RushServer) -> None:
    with async_server.connect() as pipelined, async_server.connect() as other:
        pipelined.send(
            request("GET", "/wait/order")
            + request("GET", "/fast?id=2")
            + request("GET", "/sleep?id=3&ms=20")
            + request("GET", "/no-suspend")
            + request("GET", "/fast?id=5")
        )
        # The handler is suspended: the later requests wait behind it.
        assert pipelined.nothing_arrives(0.2)
        other.send(request("GET", "/release/order"))
        assert other.read_response().status == 200
        first, second, third, fourth, fifth = pipelined.read_responses(5)
    assert first.json() == {"key": "order", "waited": True}
    assert second.json() == {"id": "2", "slept": False}
    assert third.json() == {"id": "3", "slept": True}
    assert fourth.text == "finished without suspending"
    assert fifth.json() == {"id": "5", "slept": False}


def test_a_plain_handler_after_an_async_one_runs_outside_any_task(async_server: RushServer) -> None:
    """The loop may keep the task it runs coroutines as current between the
    ASGI requests it answers in one pass; a rush App's plain handlers, even
    pipelined right behind an async one, must not see it."""
    with async_server.connect() as connection:
        connection.send(request("GET", "/no-suspend") + request("GET", "/task") + request("GET", "/task"))
        first, second, third = connection.read_responses(3)
    assert first.text == "finished without suspending"
    assert second.json() == third.json() == {"task": False}


def test_many_pipelined_async_and_sync_requests_keep_their_order(async_server: RushServer) -> None:
    requests = [
        request("GET", f"/sleep?id={number}&ms={(number * 7) % 5}")
        if number % 2
        else request("GET", f"/fast?id={number}")
        for number in range(40)
    ]
    with async_server.connect() as connection:
        connection.send(b"".join(requests))
        responses = connection.read_responses(40)
    assert [response.json()["id"] for response in responses] == [str(number) for number in range(40)]


def test_async_handlers_run_on_uvloop_when_it_is_installed(async_client: httpx.Client) -> None:
    expected = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    assert async_client.get("/loop").text.startswith(expected)


def test_async_handler_results(async_client: httpx.Client) -> None:
    response = async_client.get("/response")
    assert (response.status_code, response.text, response.headers["x-async"]) == (201, "async response", "1")
    echo = async_client.post("/echo?x=1", content=b"async body").json()
    assert (echo["body"], echo["query"], echo["method"]) == ("async body", [["x", "1"]], "POST")


@pytest.mark.parametrize("path", ["/raise-after-await", "/raise-before-await"])
def test_async_handler_exception_is_a_500_and_the_connection_lives_on(async_server: RushServer, path: str) -> None:
    with async_server.connect() as connection:
        connection.send(request("GET", path) + request("GET", "/sleep?id=after&ms=1"))
        failed, after = connection.read_responses(2)
    assert failed.status == 500
    assert after.json() == {"id": "after", "slept": True}
    async_server.wait_for_log("ValueError: async boom " + path.removeprefix("/raise-").replace("-", " "))


def test_head_on_a_suspending_async_handler(async_server: RushServer) -> None:
    with async_server.connect() as connection:
        connection.send(request("HEAD", "/sleep?id=h&ms=5") + request("GET", "/sleep?id=g&ms=5"))
        head, get = connection.read_responses(2, ["HEAD", "GET"])
    assert head.body == b""
    assert head.header("content-length") == get.header("content-length")
    assert get.json()["id"] == "g"


def test_connection_close_on_a_suspended_request_ends_the_pipeline(async_server: RushServer) -> None:
    def calls() -> int:
        with async_server.connect() as connection:
            connection.send(request("GET", "/count"))
            return connection.read_response().json()["calls"]

    before = calls()
    with async_server.connect() as pipelined, async_server.connect() as other:
        pipelined.send(request("GET", "/wait/closing", [("Connection", "close")]) + request("GET", "/fast?id=never"))
        other.send(request("GET", "/release/closing"))
        other.read_response()
        result = pipelined.read_until_close()
    assert [response.status for response in result.responses] == [200]
    assert result.responses[0].closes
    assert calls() == before + 2  # /wait and /release; /fast never ran


def test_client_leaving_during_a_suspended_handler_harms_nothing(async_server: RushServer) -> None:
    leaving = async_server.connect()
    leaving.send(request("GET", "/wait/abandoned"))
    leaving.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    leaving.close()  # a reset, while the handler is suspended
    # A new connection may take the same slot; the late result must not land on it.
    with async_server.connect() as newcomer, async_server.connect() as releasing:
        newcomer.send(request("GET", "/wait/newcomer"))
        releasing.send(request("GET", "/release/abandoned"))
        assert releasing.read_response().status == 200
        assert newcomer.nothing_arrives(0.2)
        releasing.send(request("GET", "/release/newcomer"))
        assert releasing.read_response().status == 200
        assert newcomer.read_response().json() == {"key": "newcomer", "waited": True}
    async_server.assert_running()


def test_sync_and_async_apps_log_nothing_unexpected(basic_server: RushServer, async_server: RushServer) -> None:
    for server in (basic_server, async_server):
        wait_for(lambda server=server: server.worker_pids(), "workers")
        assert server.problems() == [], server.describe()


def test_json_helper_round_trip(client: httpx.Client) -> None:
    # Non-ASCII JSON keeps its characters (UTF-8), as json.loads reads them.
    assert json.loads(client.get("/json").content)["message"] == "h\u00e9llo"


# ---------------------------------------------------------------------------
# Threads


def _ticks(path: Path) -> int:
    try:
        return int(path.read_text() or 0)
    except (FileNotFoundError, ValueError):
        return 0


def test_python_threads_run_while_the_loop_waits_for_requests(rush_server: ServerFactory, tmp_path: Path) -> None:
    """The loop releases the GIL while it waits in epoll, so an app's own
    thread keeps running when no request arrives."""
    tick_file = tmp_path / "ticks"
    server = rush_server("threaded", env=clean_environment({"RUSHTEST_TICK_FILE": str(tick_file)}))
    with server.connect() as connection:
        connection.send(request("GET", "/ticks"))
        assert connection.read_response().status == 200
    # From here on no request arrives: the worker sits in epoll_wait.
    first = wait_for(lambda: _ticks(tick_file), "the app's thread to start ticking")
    wait_for(lambda: _ticks(tick_file) >= first + 20, "the app's thread to keep ticking while the loop is idle")


# ---------------------------------------------------------------------------
# Large request bodies (past any in-memory threshold the server may have)

LARGE_SIZES = [1024 * 1024 - 1, 1024 * 1024, 1024 * 1024 + 1, 3 * 1024 * 1024 + 7]


def _large_body(size: int) -> bytes:
    pattern = hashlib.sha256(str(size).encode()).digest() * 8
    return (pattern * (size // len(pattern) + 1))[:size]


@pytest.mark.parametrize("size", LARGE_SIZES)
@pytest.mark.parametrize("which", ["sync", "async"])
def test_large_content_length_body_reaches_the_handler_intact(
    basic_server: RushServer, async_server: RushServer, which: str, size: int
) -> None:
    server = basic_server if which == "sync" else async_server
    body = _large_body(size)
    with server.connect() as connection:
        connection.send(request("POST", "/digest", body=body) + request("POST", "/digest", body=b"next"))
        first, second = connection.read_responses(2)
    assert first.json() == {"length": size, "sha256": hashlib.sha256(body).hexdigest()}
    assert second.json()["length"] == 4


@pytest.mark.parametrize("which", ["sync", "async"])
def test_large_chunked_body_reaches_the_handler_intact(
    basic_server: RushServer, async_server: RushServer, which: str
) -> None:
    server = basic_server if which == "sync" else async_server
    body = _large_body(3 * 1024 * 1024 + 11)
    pieces = [body[offset : offset + 100_000] for offset in range(0, len(body), 100_000)]
    with server.connect() as connection:
        connection.send(
            request("POST", "/digest", [("Transfer-Encoding", "chunked")], chunked(*pieces), content_length=False)
            + request("POST", "/digest", body=b"next")
        )
        first, second = connection.read_responses(2)
    assert first.json() == {"length": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    assert second.json()["length"] == 4


def test_large_body_with_httpx(client: httpx.Client) -> None:
    body = _large_body(2 * 1024 * 1024 + 5)
    assert client.put("/digest", content=body).json() == {
        "length": len(body),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
