"""HTTP/1.1 on the wire, over raw sockets: keep-alive, pipelining (three
requests in one write, Connection: close in the middle of a pipeline),
HTTP/1.0 with and without keep-alive, HEAD, Expect: 100-continue, chunked and
Content-Length bodies arriving in pieces, half-closed clients, and every
refusal the protocol rules require (400, 405, 413, 414, 431, 501, 505): each with
its status, ``Connection: close``, the connection closed afterwards, and the
app never reached (the test app counts the requests its handlers see).
"""

from __future__ import annotations

import email.utils
import itertools
import random
import re
import socket
from datetime import UTC, datetime

import pytest
from support import Connection, RushServer, ServerFactory, chunked, request

# Small limits, so that 413, 414 and 431 are cheap to provoke.
MAX_BODY = 1000
MAX_REQUEST_LINE = 256
MAX_HEAD = 4096
MAX_HEADERS = 20


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory) -> RushServer:
    return module_servers(
        "basic",
        "--max-body-size",
        MAX_BODY,
        "--max-request-line",
        MAX_REQUEST_LINE,
        "--max-head-size",
        MAX_HEAD,
        "--max-headers",
        MAX_HEADERS,
    )


def app_calls(server: RushServer) -> int:
    """How many requests reached a handler of the (single) worker so far."""
    with server.connect() as connection:
        connection.send(request("GET", "/count", [("Connection", "close")]))
        return connection.read_response().json()["calls"]


def echo_ids(responses: list) -> list[str]:
    return [dict(response.json()["query"])["id"] for response in responses]


# ---------------------------------------------------------------------------
# Keep-alive and pipelining


def test_keep_alive_serves_several_requests_on_one_connection(server: RushServer) -> None:
    with server.connect() as connection:
        for number in range(3):
            connection.send(request("GET", f"/echo?id={number}"))
            response = connection.read_response()
            assert response.status == 200
            assert response.header("connection") is None  # HTTP/1.1: persistent by default
            assert echo_ids([response]) == [str(number)]


def test_three_pipelined_requests_in_one_write_are_answered_in_order(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/echo?id=1") + request("POST", "/echo?id=2", body=b"two") + request("GET", "/"))
        first, second, third = connection.read_responses(3)
        assert echo_ids([first, second]) == ["1", "2"]
        assert second.json()["body"] == "two"
        assert (third.status, third.body) == (200, b"Hello, World!")
        # Still open and usable afterwards.
        connection.send(request("GET", "/echo?id=4"))
        assert echo_ids(connection.read_responses(1)) == ["4"]


def test_a_hundred_pipelined_requests_in_one_write(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"".join(request("GET", f"/echo?id={number}") for number in range(100)))
        responses = connection.read_responses(100)
        assert echo_ids(responses) == [str(number) for number in range(100)]


def test_thousands_of_pipelined_requests_spanning_many_reads(server: RushServer) -> None:
    count = 3000  # about 100 KiB of requests, 600 KiB of responses
    data = b"".join(request("GET", f"/echo?id={number}") for number in range(count - 1))
    data += request("GET", f"/echo?id={count - 1}", [("Connection", "close")])
    with server.connect() as connection:
        connection.send(data)
        result = connection.read_until_close()
    assert echo_ids(result.responses) == [str(number) for number in range(count)]
    assert result.responses[-1].closes


def test_pipelined_large_responses_arrive_whole_and_in_order(server: RushServer) -> None:
    # 8 x 512 KiB is far beyond what one write to the socket takes.
    sizes = [512 * 1024 + number for number in range(8)]
    with server.connect() as connection:
        connection.send(b"".join(request("GET", f"/big?size={size}") for size in sizes) + request("GET", "/"))
        responses = connection.read_responses(len(sizes) + 1)
    assert [len(response.body) for response in responses[:-1]] == sizes
    assert all(response.body == b"x" * len(response.body) for response in responses[:-1])
    assert responses[-1].body == b"Hello, World!"


def test_connection_close_mid_pipeline_stops_processing(server: RushServer) -> None:
    before = app_calls(server)
    with server.connect() as connection:
        connection.send(
            request("GET", "/echo?id=1")
            + request("GET", "/echo?id=2", [("Connection", "close")])
            + request("GET", "/echo?id=3")
        )
        result = connection.read_until_close()
    assert echo_ids(result.responses) == ["1", "2"]
    assert not result.responses[0].closes
    assert result.responses[1].closes
    assert result.leftover == b""
    # The request after `Connection: close` never reached the app.
    assert app_calls(server) == before + 2


@pytest.mark.parametrize("value", ["close", "Close", "keep-alive, close", "CLOSE"])
def test_connection_close_tokens_are_case_insensitive(server: RushServer, value: str) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/", [("Connection", value)]))
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200]
    assert result.responses[0].closes


def test_http10_closes_after_the_response_by_default(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"GET /echo?id=1 HTTP/1.0\r\n\r\n" + request("GET", "/echo?id=2"))
        result = connection.read_until_close()
    assert len(result.responses) == 1
    response = result.responses[0]
    assert response.status == 200
    assert response.json()["http_version"] == "1.0"
    assert response.version in ("HTTP/1.0", "HTTP/1.1")


def test_http10_keep_alive_keeps_the_connection_open(server: RushServer) -> None:
    keep_alive = b"GET /echo?id=%d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
    with server.connect() as connection:
        connection.send(keep_alive % 1)
        first = connection.read_response()
        assert (first.header("connection") or "").lower() == "keep-alive"
        connection.send(keep_alive % 2 + b"GET /echo?id=3 HTTP/1.0\r\n\r\n")
        result = connection.read_until_close()
    assert echo_ids([first, *result.responses]) == ["1", "2", "3"]
    assert (result.responses[0].header("connection") or "").lower() == "keep-alive"
    assert result.responses[1].closes


def test_http10_request_without_host_is_served(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"GET / HTTP/1.0\r\n\r\n")
        result = connection.read_until_close()
    assert [(response.status, response.body) for response in result.responses] == [(200, b"Hello, World!")]


def test_leading_empty_lines_before_a_request_are_ignored(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"\r\n\r\n" + request("GET", "/"))
        assert connection.read_response().body == b"Hello, World!"


def test_half_closed_client_still_gets_every_pipelined_response(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"".join(request("GET", f"/echo?id={number}") for number in range(3)))
        connection.sock.shutdown(socket.SHUT_WR)
        result = connection.read_until_close()
    assert echo_ids(result.responses) == ["0", "1", "2"]


def test_every_response_has_a_date_header(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/") + request("GET", "/missing") + request("GET", "/easter"))
        responses = connection.read_responses(3)
        connection.send(b"GET / HTTP/1.1\r\n\r\n")  # no Host: refused
        responses += connection.read_until_close().responses
    assert [response.status for response in responses] == [200, 404, 301, 400]
    for response in responses:
        date = response.header("date")
        assert date is not None, response
        # IMF-fixdate, and current (a cache that stopped refreshing would drift).
        assert re.fullmatch(r"(Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", date), date
        drift = abs((email.utils.parsedate_to_datetime(date) - datetime.now(UTC)).total_seconds())
        assert drift < 60, f"Date {date!r} is {drift:.0f}s off"


def test_native_answers_do_not_call_python(server: RushServer) -> None:
    """404s, 405s and redirects are answered by the native router alone."""
    before = app_calls(server)
    with server.connect() as connection:
        connection.send(request("GET", "/missing") + request("DELETE", "/users/1") + request("GET", "/easter"))
        assert [response.status for response in connection.read_responses(3)] == [404, 405, 301]
    assert app_calls(server) == before


# ---------------------------------------------------------------------------
# HEAD and 100-continue


def test_head_gets_the_headers_without_a_body(server: RushServer) -> None:
    with server.connect() as connection:
        # A GET after the HEAD proves no body bytes followed the HEAD response.
        connection.send(request("HEAD", "/text") + request("GET", "/text"))
        head, get = connection.read_responses(2, ["HEAD", "GET"])
    assert head.status == get.status == 200
    assert head.body == b""
    assert head.header("content-length") == get.header("content-length") == str(len(get.body))
    assert head.header("content-type") == get.header("content-type")
    assert get.body == "h\u00e9llo \u2713".encode()


def test_head_of_an_unknown_path_has_no_body(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(request("HEAD", "/missing") + request("GET", "/"))
        head, get = connection.read_responses(2, ["HEAD", "GET"])
    assert (head.status, head.body) == (404, b"")
    assert get.body == b"Hello, World!"


def test_expect_100_continue_is_answered_before_the_body_is_sent(server: RushServer) -> None:
    with server.connect() as connection:
        connection.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\nContent-Length: 11\r\n\r\n")
        interim = connection.read_response()
        assert interim.status == 100
        assert interim.raw_head.startswith(b"HTTP/1.1 100 Continue\r\n")
        connection.send(b"hello world")
        final = connection.read_response()
    assert final.status == 200
    assert final.json()["body"] == "hello world"


def test_expect_100_continue_with_a_body_over_the_limit_gets_413_and_no_100(server: RushServer) -> None:
    before = app_calls(server)
    with server.connect() as connection:
        connection.send(
            b"POST /echo HTTP/1.1\r\nHost: test\r\nExpect: 100-continue\r\n"
            + b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1)
        )
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [413]
    assert app_calls(server) == before


def test_expect_100_continue_is_ignored_for_http10(server: RushServer) -> None:
    # RFC 9110 10.1.1: a server must ignore 100-continue in an HTTP/1.0 request.
    with server.connect() as connection:
        connection.send(b"POST /echo HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok")
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200]
    assert result.responses[0].json()["body"] == "ok"


# ---------------------------------------------------------------------------
# Request bodies

CHUNKED_HEAD = b"POST /echo HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_chunked_body_with_extensions_and_trailers_then_a_pipelined_request(server: RushServer) -> None:
    body = b"5;name=value\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: ignored\r\nX-Other: too\r\n\r\n"
    with server.connect() as connection:
        connection.send(CHUNKED_HEAD + body + request("GET", "/echo?id=after"))
        first, second = connection.read_responses(2)
    assert first.json()["body"] == "hello world"
    assert first.json()["body_length"] == 11
    # Trailers are not turned into header fields.
    assert "X-Trailer" not in dict(first.json()["headers"])
    assert echo_ids([second]) == ["after"]
    assert second.json()["body"] == ""


@pytest.mark.parametrize(
    "trailer", [b"Content-Length: 0", b"transfer-encoding: chunked", b"Host: evil", b"Authorization: Basic eDp5"]
)
def test_a_trailer_field_that_must_not_be_a_trailer_is_refused(server: RushServer, trailer: bytes) -> None:
    """RFC 9110 6.5.1: framing, routing, authentication... fields in a
    trailer get a 400 and a closed connection, before the app runs (the
    request pipelined after it is not answered)."""
    body = b"5\r\nhello\r\n0\r\n" + trailer + b"\r\n\r\n"
    with server.connect() as connection:
        connection.send(CHUNKED_HEAD + body + request("GET", "/echo?id=after"))
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [400]
    assert b"trailer" in result.responses[0].body


@pytest.mark.parametrize(
    "transfer_encoding", ["chunked", "Chunked", " chunked ", "CHUNKED"], ids=["lower", "title", "spaces", "upper"]
)
def test_chunked_coding_name_is_case_insensitive(server: RushServer, transfer_encoding: str) -> None:
    with server.connect() as connection:
        connection.send(
            request("POST", "/echo", [("Transfer-Encoding", transfer_encoding)], chunked(b"abc"), content_length=False)
        )
        assert connection.read_response().json()["body"] == "abc"


def _split_points(data: bytes, where: str) -> list[int]:
    if where == "every byte":
        return list(range(1, len(data)))
    head_end = data.index(b"\r\n\r\n") + 4
    # Inside the head, between CR and LF of the last head line, inside a
    # chunk-size line, between a chunk's data and its CRLF, inside the trailers.
    return sorted(
        {
            10,
            head_end - 1,
            head_end + 1,
            data.index(b"hello") + 3,
            data.index(b"hello") + 5,
            data.index(b"hello") + 6,
            len(data) - 3,
        }
    )


@pytest.mark.parametrize("where", ["every byte", "awkward places"])
def test_chunked_body_split_across_many_writes(server: RushServer, where: str) -> None:
    data = CHUNKED_HEAD + chunked(b"hello", b" ", b"w" * 300, trailers=b"X-T: 1\r\n") + request("GET", "/echo?id=next")
    points = [0, *_split_points(data, where), len(data)]
    with server.connect() as connection:
        for start, end in itertools.pairwise(points):
            connection.send(data[start:end])
        first, second = connection.read_responses(2)
    assert first.json()["body"] == "hello " + "w" * 300
    assert echo_ids([second]) == ["next"]


def test_content_length_body_split_across_writes(server: RushServer) -> None:
    body = bytes(range(256)) * 3
    with Connection(server.address) as connection:
        connection.send(request("POST", "/echo", body=b"")[:-2])
        connection.send(b"Content-Length: %d\r\n\r\n" % len(body))
        for offset in range(0, len(body), 100):
            connection.send(body[offset : offset + 100])
        response = connection.read_response()
    assert response.json()["body"].encode("latin-1") == body


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        (b"Transfer-Encoding:\tchunked\r\n", b"5\r\nhello\r\n0\r\n\r\n"),
        (b"Transfer-Encoding: chunked\r\n", b'5 ; a = "q\\"s" ; b=c\r\nhello\r\n0;last\r\n\r\n'),
        (b"Content-Length: 005\r\n", b"hello"),
        # Not Transfer-Encoding: an ordinary field, so Content-Length frames the body.
        (b"Transfer_Encoding: chunked\r\nContent-Length: 5\r\n", b"hello"),
    ],
    ids=["tab before chunked", "quoted chunk extension", "leading zeros", "underscore is another field"],
)
def test_unusual_but_valid_framing_is_accepted(server: RushServer, framing: bytes, body: bytes) -> None:
    with server.connect() as connection:
        connection.send(POST + framing + b"\r\n" + body + request("GET", "/echo?id=next"))
        first, second = connection.read_responses(2)
    assert first.json()["body"] == "hello"
    assert echo_ids([second]) == ["next"]


def test_body_that_looks_like_a_request_is_only_a_body(server: RushServer) -> None:
    inner = request("GET", "/echo?id=smuggled")
    with server.connect() as connection:
        connection.send(request("POST", "/echo?id=outer", body=inner) + request("GET", "/echo?id=next"))
        outer, following = connection.read_responses(2)
    assert outer.json()["body"].encode() == inner
    assert echo_ids([outer, following]) == ["outer", "next"]


def test_absolute_form_request_target_is_routed_by_its_path(server: RushServer) -> None:
    # RFC 9112 3.2.2: "a server MUST accept the absolute-form in requests".
    with server.connect() as connection:
        connection.send(b"GET http://test/echo?id=7 HTTP/1.1\r\nHost: test\r\n\r\n")
        response = connection.read_response()
    assert response.status == 200, response
    assert response.json()["path"] == "/echo"
    assert echo_ids([response]) == ["7"]


def test_absolute_form_target_names_the_host(server: RushServer) -> None:
    # RFC 9112 3.2.2: the server ignores the Host field and uses the target's authority.
    with server.connect() as connection:
        connection.send(b"GET HTTP://Other.Example:8080/echo?id=8 HTTP/1.1\r\nHost: test\r\n\r\n")
        echo = connection.read_response().json()
        # Without a path the target means `/`.
        connection.send(b"GET https://[::1]:8443 HTTP/1.1\r\nHost: test\r\n\r\n")
        index = connection.read_response()
    assert echo["path"] == "/echo"
    assert dict(echo["query"]) == {"id": "8"}
    assert [name for name, _ in echo["headers"]].count("Host") == 1
    assert ["Host", "Other.Example:8080"] in echo["headers"]
    assert (index.status, index.body) == (200, b"Hello, World!")


def test_asterisk_form_options_is_not_refused(server: RushServer) -> None:
    # `OPTIONS *` is the one place `*` is a valid target; the router has no `*` route.
    with server.connect() as connection:
        connection.send(request("OPTIONS", "*") + request("GET", "/"))
        options, get = connection.read_responses(2)
    assert options.status == 404, options
    assert not options.closes
    assert get.body == b"Hello, World!"


def test_connect_is_refused_with_405_and_an_empty_allow(server: RushServer) -> None:
    # rush is not a proxy: a well-formed CONNECT asks for something it never does.
    before = app_calls(server)
    with server.connect() as connection:
        connection.send(b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [405], result
    response = result.responses[0]
    assert response.closes
    assert response.header_list("allow") == [""]
    assert b"not a proxy" in response.body
    assert app_calls(server) == before


# ---------------------------------------------------------------------------
# Refusals: status, Connection: close, closed connection, app never reached

H = b"Host: test\r\n"
POST = b"POST /echo HTTP/1.1\r\n" + H
TE_CHUNKED = POST + b"Transfer-Encoding: chunked\r\n\r\n"

REFUSALS = {
    # Framing (request smuggling lives here)
    "content-length and transfer-encoding": (
        POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
    ),
    "transfer-encoding and content-length": (
        POST + b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        400,
    ),
    "differing content-length fields": (POST + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400),
    "differing content-length list": (POST + b"Content-Length: 5, 6\r\n\r\nhello!", 400),
    "content-length letters": (POST + b"Content-Length: abc\r\n\r\n", 400),
    "content-length negative": (POST + b"Content-Length: -1\r\n\r\n", 400),
    "content-length plus sign": (POST + b"Content-Length: +5\r\n\r\nhello", 400),
    "content-length hex": (POST + b"Content-Length: 0x5\r\n\r\nhello", 400),
    "content-length empty": (POST + b"Content-Length: \r\n\r\n", 400),
    "content-length inner space": (POST + b"Content-Length: 1 5\r\n\r\nhello", 400),
    "content-length overflow": (POST + b"Content-Length: 99999999999999999999999\r\n\r\n", 400),
    "chunked not the last coding": (POST + b"Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400),
    "only gzip coding": (POST + b"Transfer-Encoding: gzip\r\n\r\n", 400),
    "chunked twice": (POST + b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400),
    "chunked in two fields": (POST + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    "transfer-encoding in http/1.0": (b"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
    "vertical tab before chunked": (POST + b"Transfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n", 400),
    "empty transfer coding": (POST + b"Transfer-Encoding: \r\n\r\n", 400),
    "empty element before chunked": (POST + b"Transfer-Encoding: ,chunked\r\n\r\n0\r\n\r\n", 400),
    "empty element after chunked": (POST + b"Transfer-Encoding: chunked,\r\n\r\n0\r\n\r\n", 400),
    "content-length with underscore": (POST + b"Content-Length: 1_0\r\n\r\n", 400),
    "content-length list with an empty element": (POST + b"Content-Length: 5,\r\n\r\nhello", 400),
    # Equal values too: RFC 9110 8.6 would allow them, nginx and strict servers refuse.
    "identical content-length fields": (POST + b"Content-Length: 5\r\nContent-Length: 5\r\n\r\nhello", 400),
    "identical content-length list": (POST + b"Content-Length: 5, 5\r\n\r\nhello", 400),
    "identical content-length list without spaces": (POST + b"Content-Length: 5,5\r\n\r\nhello", 400),
    "unknown coding": (POST + b"Transfer-Encoding: foo\r\n\r\n", 501),
    "xchunked coding": (POST + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 501),
    "unknown coding before chunked": (POST + b"Transfer-Encoding: foo, chunked\r\n\r\n0\r\n\r\n", 501),
    "identity coding": (POST + b"Transfer-Encoding: identity\r\n\r\n", 501),
    "gzip before chunked": (POST + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501),
    # Chunked bodies
    "chunk size not hex": (TE_CHUNKED + b"zz\r\nhello\r\n0\r\n\r\n", 400),
    "chunk size negative": (TE_CHUNKED + b"-1\r\nhello\r\n0\r\n\r\n", 400),
    "chunk size 0x prefix": (TE_CHUNKED + b"0x5\r\nhello\r\n0\r\n\r\n", 400),
    "chunk size overflow": (TE_CHUNKED + b"ffffffffffffffffffff\r\nhello\r\n0\r\n\r\n", 400),
    "chunk size missing": (TE_CHUNKED + b"\r\nhello\r\n0\r\n\r\n", 400),
    "chunk size trailing space": (TE_CHUNKED + b"5 \r\nhello\r\n0\r\n\r\n", 400),
    "chunk data without crlf": (TE_CHUNKED + b"5\r\nhelloXX0\r\n\r\n", 400),
    "chunk size line with bare lf": (TE_CHUNKED + b"5\nhello\r\n0\r\n\r\n", 400),
    "chunk extension too long": (TE_CHUNKED + b"3;" + b"e" * 5000 + b"\r\nabc\r\n0\r\n\r\n", 400),
    "chunk extension without a name": (TE_CHUNKED + b"3;=x\r\nabc\r\n0\r\n\r\n", 400),
    "chunk extension with an empty value": (TE_CHUNKED + b"3;a=\r\nabc\r\n0\r\n\r\n", 400),
    "chunk extension with a space inside": (TE_CHUNKED + b"3;a b\r\nabc\r\n0\r\n\r\n", 400),
    "chunk extension with trailing space": (TE_CHUNKED + b"3;a=b \r\nabc\r\n0\r\n\r\n", 400),
    "chunk extension unterminated quote": (TE_CHUNKED + b'3;a="b\r\nabc\r\n0\r\n\r\n', 400),
    "chunk extension after a quoted value": (TE_CHUNKED + b'3;a="b"c\r\nabc\r\n0\r\n\r\n', 400),
    "chunk extension with a semicolon only": (TE_CHUNKED + b"3;\r\nabc\r\n0\r\n\r\n", 400),
    "control character in trailer": (TE_CHUNKED + b"3\r\nabc\r\n0\r\nX: a\x01b\r\n\r\n", 400),
    "trailers too large": (TE_CHUNKED + b"3\r\nabc\r\n0\r\nX: " + b"a" * 10000 + b"\r\n\r\n", 431),
    "chunked body over the limit": (
        TE_CHUNKED + b"%x\r\n" % (MAX_BODY + 1) + b"a" * (MAX_BODY + 1) + b"\r\n0\r\n\r\n",
        413,
    ),
    "chunks adding up over the limit": (
        TE_CHUNKED + b"".join(b"%x\r\n%s\r\n" % (300, b"a" * 300) for _ in range(4)) + b"0\r\n\r\n",
        413,
    ),
    # Line endings and field syntax
    "bare cr between fields": (b"GET / HTTP/1.1\r\n" + H + b"X-A: 1\rX-B: 2\r\n\r\n", 400),
    "bare cr in a value": (b"GET / HTTP/1.1\r\n" + H + b"X-A: a\rb\r\n\r\n", 400),
    "bare cr in the request line": (b"GET /\r HTTP/1.1\r\n" + H + b"\r\n", 400),
    "bare lf line endings": (b"GET / HTTP/1.1\nHost: test\n\n", 400),
    "bare lf after one field": (b"GET / HTTP/1.1\r\nHost: test\nX-A: b\r\n\r\n", 400),
    "space before colon": (b"GET / HTTP/1.1\r\n" + H + b"X-A : b\r\n\r\n", 400),
    "tab before colon": (b"GET / HTTP/1.1\r\n" + H + b"X-A\t: b\r\n\r\n", 400),
    "space before colon of host": (b"GET / HTTP/1.1\r\nHost : test\r\n\r\n", 400),
    "space before colon of content-length": (POST + b"Content-Length : 5\r\n\r\nhello", 400),
    "control character 0x01 in value": (b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x01b\r\n\r\n", 400),
    "nul in value": (b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n", 400),
    "del in value": (b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x7fb\r\n\r\n", 400),
    "escape in value": (b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x1bb\r\n\r\n", 400),
    "obsolete line folding": (b"GET / HTTP/1.1\r\n" + H + b"X-A: a\r\n b\r\n\r\n", 400),
    "whitespace before the first field": (b"GET / HTTP/1.1\r\n Host: test\r\n\r\n", 400),
    "empty field name": (b"GET / HTTP/1.1\r\n" + H + b": v\r\n\r\n", 400),
    "field without colon": (b"GET / HTTP/1.1\r\n" + H + b"X-A\r\n\r\n", 400),
    "invalid field name": (b"GET / HTTP/1.1\r\n" + H + b"X(A: v\r\n\r\n", 400),
    "non-ascii field name": (b"GET / HTTP/1.1\r\n" + H + b"X-\xff: v\r\n\r\n", 400),
    "invalid method": (b"G(T / HTTP/1.1\r\n" + H + b"\r\n", 400),
    "two spaces in the request line": (b"GET  / HTTP/1.1\r\n" + H + b"\r\n", 400),
    "space in the target": (b"GET /a b HTTP/1.1\r\n" + H + b"\r\n", 400),
    "lowercase version": (b"GET / http/1.1\r\n" + H + b"\r\n", 400),
    "tls handshake": (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 50, 400),
    # Request targets (RFC 9112 3.2)
    "fragment in the target": (b"GET /echo?page=1#top HTTP/1.1\r\n" + H + b"\r\n", 400),
    "fragment in an absolute-form target": (b"GET http://test/echo#top HTTP/1.1\r\n" + H + b"\r\n", 400),
    "raw utf-8 in the path": (b"GET /echo/caf\xc3\xa9 HTTP/1.1\r\n" + H + b"\r\n", 400),
    "raw utf-8 in the query": (b"GET /echo?q=\xe2\x9c\x93 HTTP/1.1\r\n" + H + b"\r\n", 400),
    "raw byte 0x80 in the target": (b"GET /echo\x80 HTTP/1.1\r\n" + H + b"\r\n", 400),
    "control character in the target": (b"GET /echo\x01 HTTP/1.1\r\n" + H + b"\r\n", 400),
    "del in the target": (b"GET /echo\x7f HTTP/1.1\r\n" + H + b"\r\n", 400),
    "tab in the target": (b"GET /echo\t HTTP/1.1\r\n" + H + b"\r\n", 400),
    "relative target": (b"GET echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "relative target with a slash": (b"GET foo/bar HTTP/1.1\r\n" + H + b"\r\n", 400),
    "query-only target": (b"GET ?id=1 HTTP/1.1\r\n" + H + b"\r\n", 400),
    "unknown scheme": (b"GET s://]ufd/admin HTTP/1.1\r\n" + H + b"\r\n", 400),
    "ftp scheme": (b"GET ftp://test/echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "absolute-form without authority": (b"GET http:/echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "absolute-form with an empty host": (b"GET http:///echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "absolute-form with userinfo": (b"GET http://user@test/echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "absolute-form port over 65535": (b"GET http://test:65536/echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "absolute-form port of six digits": (b"GET http://test:000080/echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "absolute-form bad ipv6": (b"GET http://[::1/echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "asterisk with get": (b"GET * HTTP/1.1\r\n" + H + b"\r\n", 400),
    "authority-form with get": (b"GET test:80 HTTP/1.1\r\n" + H + b"\r\n", 400),
    "connect with a path": (b"CONNECT /echo HTTP/1.1\r\n" + H + b"\r\n", 400),
    "connect without a port": (b"CONNECT example.com HTTP/1.1\r\n" + H + b"\r\n", 400),
    "connect with absolute-form": (b"CONNECT http://example.com:443/ HTTP/1.1\r\n" + H + b"\r\n", 400),
    "connect with a valid authority": (b"CONNECT example.com:443 HTTP/1.1\r\n" + H + b"\r\n", 405),
    "connect to an ipv6 literal": (b"CONNECT [::1]:443 HTTP/1.1\r\n" + H + b"\r\n", 405),
    # Host
    "missing host in http/1.1": (b"GET / HTTP/1.1\r\n\r\n", 400),
    "duplicate host": (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    "duplicate identical host": (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400),
    "duplicate host in http/1.0": (b"GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    # Versions
    "http/2.0": (b"GET / HTTP/2.0\r\n" + H + b"\r\n", 505),
    "http/3.0": (b"GET / HTTP/3.0\r\n" + H + b"\r\n", 505),
    "http/0.9": (b"GET / HTTP/0.9\r\n" + H + b"\r\n", 505),
    # (The HTTP/2 preface is HTTP/2 under the default --http auto; with --http 1
    # it is refused with 505: tests/test_http2.py.)
    # Limits
    "request line too long": (b"GET /" + b"a" * MAX_REQUEST_LINE + b" HTTP/1.1\r\n" + H + b"\r\n", 414),
    "request line too long, unfinished": (b"GET /" + b"a" * (MAX_REQUEST_LINE * 2), 414),
    "too many fields": (
        b"GET / HTTP/1.1\r\n" + H + b"".join(b"X-%d: v\r\n" % n for n in range(MAX_HEADERS)) + b"\r\n",
        431,
    ),
    "head too large": (b"GET / HTTP/1.1\r\n" + H + b"X-Big: " + b"v" * MAX_HEAD + b"\r\n\r\n", 431),
    "head too large, unfinished": (b"GET / HTTP/1.1\r\n" + H + b"X-Big: " + b"v" * (MAX_HEAD + 10), 431),
    "content-length over the limit": (POST + b"Content-Length: %d\r\n\r\n" % (MAX_BODY + 1), 413),
}


@pytest.mark.parametrize(("data", "status"), list(REFUSALS.values()), ids=list(REFUSALS))
def test_refused_request_gets_its_status_and_the_connection_closes(
    server: RushServer, data: bytes, status: int
) -> None:
    before = app_calls(server)
    with server.connect() as connection:
        connection.send(data)
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [status], result
    response = result.responses[0]
    assert response.closes, response
    assert int(response.header("content-length")) == len(response.body)
    assert result.leftover == b""
    assert app_calls(server) == before, "a refused request reached the app"


@pytest.mark.parametrize("host", ["exa mple.com", "example.com/path", "example.com:80x", "user@example.com", "[::1"])
def test_invalid_host_value_is_refused(server: RushServer, host: str) -> None:
    before = app_calls(server)
    with server.connect() as connection:
        connection.send(b"GET /echo HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
        response = connection.read_response()
        assert response.status == 400, response
        connection.assert_closed()
    assert app_calls(server) == before


@pytest.mark.parametrize(
    "host", ["example.com", "example.com:8080", "127.0.0.1:80", "[::1]:8000", "xn--bcher-kva.example"]
)
def test_valid_host_values_are_accepted(server: RushServer, host: str) -> None:
    with server.connect() as connection:
        connection.send(b"GET /echo HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
        assert ["Host", host] in connection.read_response().json()["headers"]


def test_refusal_in_a_pipeline_answers_the_requests_before_it_and_nothing_after(server: RushServer) -> None:
    before = app_calls(server)
    with server.connect() as connection:
        connection.send(
            request("GET", "/echo?id=1")
            + request("GET", "/echo?id=2")
            + b"GET /echo?id=bad HTTP/1.1\r\n\r\n"  # no Host
            + request("GET", "/echo?id=4")
        )
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200, 200, 400]
    assert echo_ids(result.responses[:2]) == ["1", "2"]
    assert result.responses[2].closes
    assert app_calls(server) == before + 2


def test_smuggling_attempt_never_reaches_the_app(server: RushServer) -> None:
    # A front end honouring Content-Length would see one request; one
    # honouring Transfer-Encoding would see a second one inside the body.
    smuggled = request("GET", "/echo?id=smuggled")
    body = b"0\r\n\r\n" + smuggled
    before = app_calls(server)
    with server.connect() as connection:
        connection.send(POST + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body) + body)
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [400]
    assert app_calls(server) == before


def test_refusal_is_readable_although_the_client_keeps_sending(server: RushServer) -> None:
    """After refusing, the server reads and discards what the client still
    sends, so the client gets the answer rather than a connection reset."""
    with server.connect() as connection:
        connection.send(POST + b"Transfer-Encoding: foo\r\n\r\n")
        for _ in range(16):
            try:
                connection.send(b"x" * 4096)
            except (BrokenPipeError, ConnectionResetError):
                break
        response = connection.read_responses(1)[0]
    assert response.status == 501
    assert response.closes


def test_worker_survives_every_refusal(server: RushServer) -> None:
    """The refusals above all went to one worker: it is still the same process and serves normally."""
    with server.connect() as connection:
        connection.send(request("GET", "/pid"))
        assert int(connection.read_response().body) == server.single_worker()
    server.assert_running()


# ---------------------------------------------------------------------------
# A long mixed pipeline, cut into arbitrary pieces


def _mixed_pipeline(count: int) -> tuple[bytes, list[str], list[str]]:
    """Requests of every framing; returns the bytes, the methods and the expected ids."""
    data = b""
    methods, ids = [], []
    for number in range(count):
        kind = number % 4
        if kind == 0:
            data += request("GET", f"/echo?id={number}")
            methods.append("GET")
        elif kind == 1:
            data += request("POST", f"/echo?id={number}", body=b"cl-%d" % number)
            methods.append("POST")
        elif kind == 2:
            body = chunked(b"ch", b"-%d" % number, trailers=b"X-T: %d\r\n" % number)
            data += request(
                "POST", f"/echo?id={number}", [("Transfer-Encoding", "chunked")], body, content_length=False
            )
            methods.append("POST")
        else:
            data += request("HEAD", f"/echo?id={number}")
            methods.append("HEAD")
        ids.append(str(number))
    return data, methods, ids


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("app", ["sync", "async"])
def test_mixed_pipeline_in_random_pieces(server: RushServer, async_server: RushServer, app: str, seed: int) -> None:
    target = server if app == "sync" else async_server
    data, methods, ids = _mixed_pipeline(40)
    rng = random.Random(seed)
    points = sorted(rng.sample(range(1, len(data)), 60))
    with target.connect() as connection:
        for start, end in itertools.pairwise([0, *points, len(data)]):
            connection.send(data[start:end])
        responses = connection.read_responses(len(ids), methods)
    assert all(response.status == 200 for response in responses)
    for number, (response, method) in enumerate(zip(responses, methods, strict=True)):
        if method == "HEAD":
            assert response.body == b""
            continue
        echo = response.json()
        assert dict(echo["query"]) == {"id": ids[number]}
        expected = {0: "", 1: f"cl-{number}", 2: f"ch-{number}"}[number % 4]
        assert echo["body"] == expected
