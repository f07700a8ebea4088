"""HTTP/2 requests that RFC 9113 section 8 calls malformed, sent by a raw
peer (h2_raw.py: frames by hand) to a running ``rush --http auto``: each
gets RST_STREAM(PROTOCOL_ERROR) on its stream (RFC 9113 section 8.1.1),
never reaches the app (tests/apps/h2_hostile.py counts the requests that
did), is logged as a refused request and counted, and the connection's
next stream is answered.

Where the ``h2`` Python package (its inbound validation on) has an opinion
on a shape, it is the oracle: it must refuse what rush refuses, and accept
the well-formed look-alikes rush serves. For the shapes it accepts (a
fragment in ``:path``, ``*`` for a method other than OPTIONS, userinfo in
``:authority``) the RFC text decides, quoted in the case.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import h2.config
import h2.connection
import h2.exceptions
import hpack
import httpx
import pytest
from h2_raw import (
    DATA,
    END_HEADERS,
    END_STREAM,
    HEADERS,
    PREFACE,
    PROTOCOL_ERROR,
    RST_STREAM,
    RawH2,
    frame,
    settings,
)
from support import GUARD_TIMEOUT, RushServer, ServerFactory, free_port

APP = "tests.apps.h2_hostile:app"
AUTHORITY = b"127.0.0.1"

Fields = list[tuple[bytes, bytes]]


def request(path: bytes = b"/hit", method: bytes = b"GET", authority: bytes = AUTHORITY, extra: Fields = ()) -> Fields:
    return [(b":method", method), (b":scheme", b"http"), (b":path", path), (b":authority", authority), *extra]


@dataclass
class Shape:
    name: str
    head: Fields
    # Trailer fields after a 3-byte body (the request then goes to /drain).
    trailers: Fields | None = None
    # What the h2 package (validate_inbound_headers) says: True refuses,
    # False accepts, None: it does not check this shape (the RFC decides).
    h2_refuses: bool | None = True
    # Lost inside h2 and http before rush sees the request (the fragment is
    # dropped from :path, the pseudo-fields from the trailers): not caught
    # until h2 refuses them itself (docs/architecture.md, "HTTP/2"), so an
    # expected failure; once h2 resets them, rush still never sees them,
    # and there is no log line.
    by_h2: bool = False


MALFORMED = [
    # RFC 9113 8.3.1: ":path ... includes the path and query parts of the target URI".
    Shape("fragment in :path", request(b"/hit#part"), h2_refuses=None, by_h2=True),
    Shape("leading space in a value", request(extra=[(b"x-a", b" v")])),
    Shape("leading tab in a value", request(extra=[(b"x-a", b"\tv")])),
    Shape("trailing space in a value", request(extra=[(b"x-a", b"v ")])),
    Shape("trailing tab in a value", request(extra=[(b"x-a", b"v\t")])),
    Shape("host differs from :authority", request(extra=[(b"host", b"other.example")])),
    # RFC 9113 8.3.1: ":path ... MUST NOT be empty ... [except] '*' for an OPTIONS request".
    Shape("* as :path of a GET", request(b"*"), h2_refuses=None),
    # RFC 9113 8.3.1: ":authority MUST NOT include the deprecated userinfo subcomponent".
    Shape("userinfo in :authority", request(authority=b"user@127.0.0.1"), h2_refuses=None),
    Shape("pseudo-header field in trailers", request(b"/drain", b"POST"), trailers=[(b":path", b"/other")], by_h2=True),
    Shape(
        "pseudo-header field first in trailers",
        request(b"/drain", b"POST"),
        trailers=[(b":method", b"GET"), (b"x-t", b"1")],
        by_h2=True,
    ),
]

WELL_FORMED = [
    # The h2 package compares the two byte for byte; RFC 9113 8.3.1 says "the values of fields
    # need to be normalized to compare them", and a host is case-insensitive (RFC 3986 3.2.2).
    Shape(
        "host equal to :authority but for case",
        request(authority=b"Example.test", extra=[(b"host", b"example.TEST")]),
        h2_refuses=None,
    ),
    Shape(
        "host with the default port",
        request(authority=b"example.test", extra=[(b"host", b"example.test:80")]),
        h2_refuses=None,
    ),
    Shape("inner whitespace in a value", request(extra=[(b"x-a", b"a b\tc")]), h2_refuses=False),
    Shape("regular trailers", request(b"/drain", b"POST"), trailers=[(b"x-t", b"1")], h2_refuses=False),
]


def frames_of(shape: Shape, encoder: hpack.Encoder, stream: int = 1) -> bytes:
    if shape.trailers is None:
        return frame(HEADERS, END_STREAM | END_HEADERS, stream, encoder.encode(shape.head))
    return (
        frame(HEADERS, END_HEADERS, stream, encoder.encode(shape.head))
        + frame(DATA, 0, stream, b"abc")
        + frame(HEADERS, END_STREAM | END_HEADERS, stream, encoder.encode(shape.trailers))
    )


def h2_package_refuses(shape: Shape) -> bool:
    """Whether the h2 package, validating inbound headers, refuses the shape."""
    config = h2.config.H2Configuration(client_side=False, validate_inbound_headers=True)
    connection = h2.connection.H2Connection(config=config)
    connection.initiate_connection()
    try:
        connection.receive_data(PREFACE + settings() + frames_of(shape, hpack.Encoder()))
    except h2.exceptions.ProtocolError:
        return True
    return False


@pytest.mark.parametrize("shape", MALFORMED + WELL_FORMED, ids=lambda shape: shape.name)
def test_the_h2_package_agrees_where_it_checks(shape: Shape) -> None:
    if shape.h2_refuses is None:
        pytest.skip("the h2 package does not check this shape; RFC 9113 decides")
    assert h2_package_refuses(shape) == shape.h2_refuses


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory, metrics_port: int) -> Iterator[RushServer]:
    yield module_servers(APP, "--http", "auto", "--workers", "1", "--metrics", f"127.0.0.1:{metrics_port}")


def counter(server: RushServer, path: str) -> int:
    with httpx.Client(base_url=server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT) as client:
        return int(client.get(path).text)


def refused_400(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=GUARD_TIMEOUT).text
    line = next(line for line in text.splitlines() if line.startswith('rush_requests_refused_total{status="400"}'))
    return float(line.rsplit(" ", 1)[1])


def exchange(server: RushServer, shape: Shape) -> tuple[list[tuple[str, int | bytes]], bytes]:
    """Sends the shape on stream 1, then a request for /pid on stream 3 of
    the same connection; returns what came on stream 1 (once stream 1 ended
    or was reset) and stream 3's body."""
    encoder = hpack.Encoder()
    stream1: list[tuple[str, int | bytes]] = []
    body3 = b""
    with RawH2(server.port) as peer:
        peer.send(frames_of(shape, encoder))
        done1 = done3 = False
        while not (done1 and done3):
            got = peer.read_frame()
            assert got is not None, f"the connection closed: stream 1 got {stream1}"
            if got.stream == 1:
                if got.kind == RST_STREAM:
                    stream1.append(("reset", got.error_code))
                elif got.kind == HEADERS:
                    stream1.append(("status", got.status or 0))
                elif got.kind == DATA:
                    stream1.append(("data", got.payload))
                done1 = got.kind == RST_STREAM or bool(got.flags & END_STREAM)
                if done1 and not done3:
                    # Only now: a request on a stream opened after the shape's.
                    peer.send(frame(HEADERS, END_STREAM | END_HEADERS, 3, encoder.encode(request(b"/pid"))))
            elif got.stream == 3:
                assert got.kind != RST_STREAM, "the connection's next stream was reset"
                if got.kind == DATA:
                    body3 += got.payload
                done3 = bool(got.flags & END_STREAM) and got.kind in (DATA, HEADERS)
    return stream1, body3


LOST_IN_H2 = pytest.mark.xfail(
    strict=True, reason="h2 0.4 drops the fragment and the trailers' pseudo-fields before rush sees the request"
)


@pytest.mark.parametrize(
    "shape",
    [pytest.param(shape, marks=LOST_IN_H2) if shape.by_h2 else shape for shape in MALFORMED],
    ids=lambda shape: shape.name,
)
def test_a_malformed_request_is_reset_and_never_reaches_the_app(
    server: RushServer, metrics_port: int, shape: Shape
) -> None:
    count_path = "/drains" if shape.trailers is not None else "/hits"
    before, refused_before = counter(server, count_path), refused_400(metrics_port)
    logged_before = server.stderr_text().count("malformed HTTP/2 request")
    stream1, body3 = exchange(server, shape)
    assert stream1 == [("reset", PROTOCOL_ERROR)]
    assert body3.isdigit(), "the connection's next stream was not answered"
    assert counter(server, count_path) == before, "the app saw the malformed request"
    if not shape.by_h2:
        # Refused by rush itself: a WARNING line and a count, as HTTP/1.1
        # logs a refused head.
        server.wait_for_log("malformed HTTP/2 request", count=logged_before + 1)
        assert refused_400(metrics_port) == refused_before + 1


@pytest.mark.parametrize("shape", WELL_FORMED, ids=lambda shape: shape.name)
def test_a_well_formed_look_alike_is_served(server: RushServer, shape: Shape) -> None:
    stream1, body3 = exchange(server, shape)
    assert stream1[0] == ("status", 200)
    expected = b"drained" if shape.trailers is not None else b"hit"
    assert b"".join(part for kind, part in stream1 if kind == "data") == expected
    assert body3.isdigit()


def test_options_star_is_not_malformed(server: RushServer) -> None:
    stream1, _ = exchange(server, Shape("OPTIONS *", request(b"*", b"OPTIONS")))
    assert stream1 and stream1[0][0] == "status"
