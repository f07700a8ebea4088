"""Differential tests over HTTP/3: the same ASGI apps under rush (``--http3``) and under hypercorn
(``--quic-bind``, aioquic underneath), the only Python server that speaks HTTP/3, as the oracle.

Both serve TLS with the same certificate on a TCP port and the UDP port of the same number,
one worker each, the apps wrapped in the recorder; the same requests go to both through the
tests' aioquic client (tests/h3_client.py). What the client got (status, fields, body) and what
the app saw (the whole ASGI scope, every ``receive()``) are compared, with ``Pair.compare``'s
port and clock masks and tests/differential/deliberate.toml, plus the masks below, each with
its reason.

Not compared here, because hypercorn 0.18 does not do them over HTTP/3 (tried): trailers
(it sends the trailing HEADERS, then fails on the empty DATA frame it ends the stream with, so
the stream never ends), ``http.disconnect`` after a client's stream cancel (its H3 protocol drops
the QUIC reset), GOAWAY on stop, and a 500 for an app that raises before its response (the
stream stays open, unanswered). tests/test_http3.py checks those on rush alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from h3_client import H3Client, H3Response, free_tcp_and_udp_port, sockets_on
from harness import Pair, Side, asgi_app_view, response_view, start_pair
from support import ServerFactory, wait_for, write_localhost_pki

# Response fields that describe the server's listeners, not the app's answer: hypercorn puts its
# own `alt-svc: h3=":PORT"; ma=3600` on every response, HTTP/3 ones included; what rush announces
# (and where) is checked in tests/test_http3.py.
LISTENER_FIELDS = ("alt-svc",)
# Scope keys each server fills with what it implements rather than with what the request said:
# `extensions` lists the ASGI extensions the server offers (rush's are checked in its own tests,
# the scope over HTTP/1.1 against uvicorn's in deliberate.toml), `asgi.spec_version` the version
# of the spec it follows.
SERVER_DESCRIBED = ("extensions", "asgi")
TEXT = [("content-type", "text/plain")]
JSON = [("content-type", "application/json")]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("diffh3pki"))


def tls(pki: dict[str, Path], certificate_option: str, key_option: str) -> list[str]:
    return [certificate_option, str(pki["chain"]), key_option, str(pki["key"])]


def start_h3_pair(factory: ServerFactory, app: str, pki: dict[str, Path]) -> Pair:
    """``app`` under rush --http3 and hypercorn --quic-bind, each on its own port (TCP and UDP),
    ready once both sockets of both are there."""
    rush_port, reference_port = free_tcp_and_udp_port(), free_tcp_and_udp_port()
    pair = start_pair(
        factory,
        app,
        "asgi",
        reference="hypercorn",
        bind="none",
        rush_args=["--http3", "--bind", f"127.0.0.1:{rush_port}", *tls(pki, "--ssl-certfile", "--ssl-keyfile")],
        reference_args=[
            *("--bind", f"127.0.0.1:{reference_port}", "--quic-bind", f"127.0.0.1:{reference_port}"),
            *tls(pki, "--certfile", "--keyfile"),
            # hypercorn waits out its whole graceful timeout at stop (3 s here) even with nothing
            # in flight; nothing is in flight when these servers stop.
            *("--graceful-timeout", "1"),
        ],
    )
    for side, port in ((pair.rush, rush_port), (pair.reference, reference_port)):
        side.server.port = port

        def ready(side: Side = side, port: int = port) -> bool:
            side.server.assert_running("while starting")
            return sockets_on(port) == {"udp": True, "tcp": True}

        wait_for(ready, f"{side.name} to listen on TCP and UDP port {port}\n{side.server.describe()}")
    return pair


@pytest.fixture(scope="module")
def raw(module_servers: ServerFactory, pki: dict[str, Path]) -> Pair:
    return start_h3_pair(module_servers, "raw_asgi", pki)


@pytest.fixture(scope="module")
def api(module_servers: ServerFactory, pki: dict[str, Path]) -> Pair:
    return start_h3_pair(module_servers, "fastapi_app", pki)


def h3(side: Side, pki: dict[str, Path]) -> H3Client:
    assert side.server.port is not None
    return H3Client(side.server.port, ca=pki["ca"])


def h3_view(response: H3Response, method: str = "GET") -> dict:
    """What the client got, minus the server-owned and listener fields."""
    fields = [(name, value) for name, value in response.headers if name not in LISTENER_FIELDS]
    view = response_view(response.status or 0, fields, response.body, method)
    # HTTP/3 has no chunked coding: a body without Content-Length ends with its stream.
    if view["framing"] == "close":
        view["framing"] = "stream"
    view["ended"] = response.ended
    return view


def app_view(side: Side, tag: str) -> dict:
    """What the app saw of the request tagged ``tag``: its whole scope (but the keys that
    describe the server), what ``receive()`` gave it and how its call ended."""
    view = asgi_app_view(side.wait_finished(tag))
    view["scope"] = {key: value for key, value in view["scope"].items() if key not in SERVER_DESCRIBED}
    return view


def exchange(
    client: H3Client,
    side: Side,
    tag: str,
    request: tuple[str, str],
    headers: Sequence[tuple[str, str]] = (),
    body: bytes | None = None,
) -> dict:
    """One request tagged ``tag`` (``request``: method and path): the response and what the app saw."""
    method, path = request
    response = client.request(method, path, [*headers, ("x-diff-id", tag)], body)
    return {"response": h3_view(response, method), "app": app_view(side, tag)}


def test_raw_asgi_requests_and_scopes(raw: Pair, pki: dict[str, Path]) -> None:
    """A body echoed, a response in several ``more_body`` messages, the app's own Server and Date
    and a repeated field, a 204, the scheme, the lifespan state and a HEAD: the
    responses and each whole scope (``http_version`` "3", ``scheme``, ``server``, ``client``
    host, ``headers`` with ``host`` from ``:authority``, ``state``)."""

    def script(side: Side) -> dict:
        with h3(side, pki) as client:
            return {
                "echo": exchange(
                    client, side, "echo", ("POST", "/echo"), [("content-type", "text/plain")], b"x" * 5000
                ),
                "more-body": exchange(client, side, "more-body", ("GET", "/more-body?a=1&b=%20")),
                "own-headers": exchange(client, side, "own-headers", ("GET", "/own-headers")),
                "no-content": exchange(client, side, "no-content", ("GET", "/no-content")),
                "scheme": exchange(client, side, "scheme", ("GET", "/scheme"), [("cookie", "a=1"), ("cookie", "b=2")]),
                "state": exchange(client, side, "state", ("GET", "/state")),
                "head": exchange(client, side, "head", ("HEAD", "/more-body")),
            }

    rush_view, _ = raw.check("h3-requests", script)
    assert rush_view["scheme"]["app"]["scope"]["http_version"] == "3"


def multipart(name: str, filename: str, content: bytes) -> tuple[str, bytes]:
    boundary = "h3-differential-boundary"
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        ).encode()
        + content
        + f"\r\n--{boundary}--\r\n".encode()
    )
    return f"multipart/form-data; boundary={boundary}", body


def test_fastapi_parameters_bodies_and_an_upload(api: Pair, pki: dict[str, Path]) -> None:
    """Path and query parameters (percent-encoded UTF-8), a 422 and a 404, a JSON body, and a
    600 KiB multipart upload, past QUIC's stream window."""
    document = bytes(range(256)) * 2400
    content_type, upload = multipart("file", "doc.bin", document)

    def script(side: Side) -> dict:
        item = json.dumps({"name": "Foo", "price": 35.4, "tags": ["a"]}).encode()
        with h3(side, pki) as client:
            return {
                "item": exchange(client, side, "item", ("GET", "/items/5?q=caf%C3%A9"), [("accept", "text/plain")]),
                "invalid": exchange(client, side, "invalid", ("GET", "/items/foo")),
                "missing": exchange(client, side, "missing", ("GET", "/nowhere")),
                "json": exchange(
                    client, side, "json", ("POST", "/items/"), [("content-type", "application/json")], item
                ),
                "upload": {
                    "response": h3_view(
                        client.request("POST", "/uploadfile/", [("content-type", content_type)], upload)
                    )
                },
            }

    rush_view, _ = api.check("h3-fastapi", script)
    assert json.loads(rush_view["upload"]["response"]["body"])["sha256"] == hashlib.sha256(document).hexdigest()


def test_many_streams_on_one_connection(api: Pair, pki: dict[str, Path]) -> None:
    """Twenty requests open at once on one connection, each answered with its own values."""

    def script(side: Side) -> list[dict]:
        with h3(side, pki) as client:
            answers = client.requests([("GET", f"/items/{n}?q=stream-{n}&short=1", [], None) for n in range(20)])
        return [h3_view(answer) for answer in answers]

    api.check("h3-streams", script)


# A valid request's fields; each malformed case changes one thing in it (RFC 9114 4.1.2).
VALID = [(":method", "GET"), (":scheme", "https"), (":authority", "127.0.0.1"), (":path", "/echo")]
MALFORMED: dict[str, list[tuple[str, str]]] = {
    "no-path": VALID[:3],
    "unknown-pseudo-header": [*VALID, (":colour", "red")],
    "pseudo-header-after-a-field": [*VALID[:3], ("x-a", "1"), VALID[3]],
    "upper-case-name": [*VALID, ("X-Upper", "1")],
    "connection-field": [*VALID, ("connection", "close")],
    "te-gzip": [*VALID, ("te", "gzip")],
}


def outcome_view(outcome: Any) -> str:
    """A refusal, whatever its form (a 4xx, the stream reset, the connection closed with an error),
    is "refused": how a server refuses is its choice; whether it does is what is compared."""
    if isinstance(outcome, H3Response):
        if outcome.reset_code is not None or (outcome.status is not None and 400 <= outcome.status < 500):
            return "refused"
        return f"answered {outcome.status}"
    return "refused" if outcome.error_code not in (0, 0x100) else "closed without error"


# Malformed requests rush --http3 passes to the app, found by this test when --http3 landed (see
# tests/test_http3.py's REACHES_THE_APP): strict, so a fix shows as an unexpected pass.
RUSH_ANSWERS = ("pseudo-header-after-a-field",)
RUSH_ANSWERS_IT = pytest.mark.xfail(strict=True, raises=AssertionError, reason="rush --http3 answers it")


def refusal_view(side: Side, pki: dict[str, Path], case: str, fields: list[tuple[str, str]]) -> dict:
    """How the server took one request with exactly ``fields`` (tagged ``case``), and whether
    the app was called for it: a request sent after it on a new connection is recorded only after
    it would have been (one worker, one record file, in order)."""
    with h3(side, pki) as client:
        raw_fields = [(name.encode(), value.encode()) for name, value in [*fields, ("x-diff-id", case)]]
        outcome = outcome_view(client.outcome(client.send_raw_headers(raw_fields)))
    with h3(side, pki) as client:
        after = h3_view(client.request("POST", "/echo", [("x-diff-id", f"after {case}")], b"after"))
    side.wait_finished(f"after {case}")
    return {"outcome": outcome, "after": after, "reached the app": bool(side.events(case))}


def test_the_valid_request_is_answered_by_both(raw: Pair, pki: dict[str, Path]) -> None:
    """The control of the malformed cases: the same fields without a defect."""
    rush_view, _ = raw.check("h3-valid", lambda side: refusal_view(side, pki, "valid", VALID))
    assert (rush_view["outcome"], rush_view["reached the app"]) == ("answered 200", True)


@pytest.mark.parametrize(
    "case",
    [pytest.param(case, marks=[RUSH_ANSWERS_IT]) if case in RUSH_ANSWERS else case for case in MALFORMED],
)
def test_a_malformed_request_is_refused_before_the_app(raw: Pair, pki: dict[str, Path], case: str) -> None:
    _, reference_view = raw.check(f"h3-malformed-{case}", lambda side: refusal_view(side, pki, case, MALFORMED[case]))
    assert (reference_view["outcome"], reference_view["reached the app"]) == ("refused", False)
