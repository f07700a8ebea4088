"""Differential tests of HTTP/1.1 edges over raw sockets: the same bytes sent to rush and to the
reference server in front of the raw ASGI app (uvicorn) and the raw WSGI app (gunicorn). Each
case compares the status the client gets (or that none came), the body when the app answered,
and whether the app saw the request at all. rush follows RFC 9112 more strictly than both
references: those refusals are listed, with the RFC's words, in deliberate.toml."""

from __future__ import annotations

import socket

import pytest
from harness import Pair, Side, read_all, start_pair
from support import ServerFactory, parse_responses


@pytest.fixture(scope="module")
def asgi(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "raw_asgi", "asgi")


@pytest.fixture(scope="module")
def wsgi(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "raw_wsgi", "wsgi")


def head(request_line: str, *fields: str) -> bytes:
    return ("\r\n".join([request_line, *fields]) + "\r\n\r\n").encode("latin-1")


# name -> (raw bytes with {tag} where the x-diff-id goes, method of each expected response)
CASES = {
    "plain": head("POST {path} HTTP/1.1", "Host: t", "x-diff-id: {tag}", "Content-Length: 3", "Connection: close")
    + b"abc",
    "http10-no-host": head("POST {path} HTTP/1.0", "x-diff-id: {tag}", "Content-Length: 3") + b"abc",
    "missing-host": head("POST {path} HTTP/1.1", "x-diff-id: {tag}", "Content-Length: 3", "Connection: close") + b"abc",
    "two-hosts": head(
        "POST {path} HTTP/1.1", "Host: a", "Host: b", "x-diff-id: {tag}", "Content-Length: 0", "Connection: close"
    ),
    "fragment": head(
        "POST {path}#part HTTP/1.1", "Host: t", "x-diff-id: {tag}", "Content-Length: 0", "Connection: close"
    ),
    "raw-byte-in-target": head(
        "POST {path}?q=caf\xe9 HTTP/1.1", "Host: t", "x-diff-id: {tag}", "Content-Length: 0", "Connection: close"
    ),
    "length-and-chunked": head(
        "POST {path} HTTP/1.1",
        "Host: t",
        "x-diff-id: {tag}",
        "Content-Length: 3",
        "Transfer-Encoding: chunked",
        "Connection: close",
    )
    + b"3\r\nabc\r\n0\r\n\r\n",
    "repeated-equal-length": head(
        "POST {path} HTTP/1.1",
        "Host: t",
        "x-diff-id: {tag}",
        "Content-Length: 3",
        "Content-Length: 3",
        "Connection: close",
    )
    + b"abc",
    "space-before-colon": head(
        "POST {path} HTTP/1.1", "Host: t", "x-diff-id: {tag}", "X-Bad : 1", "Content-Length: 0", "Connection: close"
    ),
    "obs-fold": head(
        "POST {path} HTTP/1.1",
        "Host: t",
        "x-diff-id: {tag}",
        "X-Folded: a",
        " b",
        "Content-Length: 0",
        "Connection: close",
    ),
    "bare-lf": b"POST {path} HTTP/1.1\nHost: t\nx-diff-id: {tag}\nContent-Length: 0\nConnection: close\n\n",
    "bad-chunk-size": head(
        "POST {path} HTTP/1.1", "Host: t", "x-diff-id: {tag}", "Transfer-Encoding: chunked", "Connection: close"
    )
    + b"zz\r\nabc\r\n0\r\n\r\n",
    "chunk-extension": head(
        "POST {path} HTTP/1.1", "Host: t", "x-diff-id: {tag}", "Transfer-Encoding: chunked", "Connection: close"
    )
    + b"3;name=value\r\nabc\r\n0\r\n\r\n",
    "unknown-coding": head(
        "POST {path} HTTP/1.1", "Host: t", "x-diff-id: {tag}", "Transfer-Encoding: gzip, chunked", "Connection: close"
    )
    + b"0\r\n\r\n",
    "http2-version": head("POST {path} HTTP/2.0", "Host: t", "x-diff-id: {tag}", "Content-Length: 0"),
    "absolute-form": head(
        "POST http://example.com{path}?x=1 HTTP/1.1",
        "Host: t",
        "x-diff-id: {tag}",
        "Content-Length: 0",
        "Connection: close",
    ),
    "expect-continue": head(
        "POST {path} HTTP/1.1",
        "Host: t",
        "x-diff-id: {tag}",
        "Expect: 100-continue",
        "Content-Length: 3",
        "Connection: close",
    )
    + b"abc",
    "pipelined": head("POST {path} HTTP/1.1", "Host: t", "x-diff-id: {tag}", "Content-Length: 1")
    + b"a"
    + head("POST {path} HTTP/1.1", "Host: t", "x-diff-id: {tag}-2", "Content-Length: 1", "Connection: close")
    + b"b",
    "control-char-in-value": head(
        "POST {path} HTTP/1.1", "Host: t", "x-diff-id: {tag}", "X-Bad: a\x01b", "Content-Length: 0", "Connection: close"
    ),
    "connect": head(
        "CONNECT example.com:443 HTTP/1.1", "Host: example.com:443", "x-diff-id: {tag}", "Connection: close"
    ),
}


def exchange(side: Side, raw: bytes, tag: str, half_close: bool = False) -> dict:
    with side.connect() as connection:
        connection.send(raw)
        if half_close:
            connection.sock.shutdown(socket.SHUT_WR)
        try:
            data = read_all(connection)
        except ConnectionResetError:
            data = connection.buffer
    responses, rest = parse_responses(data)
    return {
        "responses": [
            # A refusal's body is each server's own words; an answer from the app is compared whole.
            [response.status, response.body.decode("latin-1") if side.events(tag) else "(server's own)"]
            for response in responses
        ],
        "unparsed": rest.decode("latin-1"),
        "app_saw_it": bool(side.events(tag)),
    }


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_request_edges(case: str, interface: str, request: pytest.FixtureRequest) -> None:
    pair: Pair = request.getfixturevalue(interface)
    path = "/echo" if interface == "asgi" else "/iterate"
    tag = f"edge-{case}"
    raw = CASES[case].replace(b"{path}", path.encode()).replace(b"{tag}", tag.encode())
    pair.check(f"edge-{case}", lambda side: exchange(side, raw, tag))


@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_half_closed_client_gets_its_answer(interface: str, request: pytest.FixtureRequest) -> None:
    """A client that sends its request and shuts down its sending side (shutdown(SHUT_WR)) still
    waits for the answer (RFC 9112 9.6 lets a client half-close)."""
    pair: Pair = request.getfixturevalue(interface)
    path = "/echo" if interface == "asgi" else "/iterate"
    raw = head(f"POST {path} HTTP/1.1", "Host: t", "x-diff-id: half-close", "Content-Length: 3") + b"abc"
    pair.check("half-close", lambda side: exchange(side, raw, "half-close", half_close=True))


@pytest.mark.parametrize("reads_body", [True, False])
@pytest.mark.parametrize("interface", ["asgi", "wsgi"])
def test_expect_continue_waiting_client(interface: str, reads_body: bool, request: pytest.FixtureRequest) -> None:
    """A client that sends Expect: 100-continue and waits for the 100 before its body (RFC 9110
    10.1.1), to a route that reads the body and to one that answers without reading it."""
    pair: Pair = request.getfixturevalue(interface)
    path = {("asgi", True): "/echo", ("asgi", False): "/scheme", ("wsgi", True): "/iterate", ("wsgi", False): "/tls"}
    raw = head(f"POST {path[interface, reads_body]} HTTP/1.1", "Host: t", "Expect: 100-continue", "Content-Length: 3")

    def script(side: Side) -> list:
        with side.connect() as connection:
            connection.send(raw)
            first = connection.read_response("POST")
            seen = [first.status]
            if first.status == 100:
                connection.send(b"abc")
                seen.append(connection.read_response("POST").status)
        return seen

    pair.check(f"expect-wait {reads_body}", script)
