"""The response cache against its oracle: the same app served uncached.

Hypothesis draws sequences of requests (paths and path parameters, query
parameters in any order with extra ones, Host, trusted ``X-Forwarded-*``,
``Accept-Encoding``, ``Origin``, ``Accept-Language``, ``Range``,
``If-None-Match``, ``Authorization``, ``Cookie``, HEAD) and sends each one to
two servers of the same deterministic app (tests/apps/cache_keyed.py), over
HTTP/1.1 or, for about a third of the requests, HTTP/2 (h2c: ``Host`` as
``:authority``; both servers asked over the same protocol; one cache entry
serves both): one with the cache (``--cache`` paths, or ``Cache(...)`` on the rush App's
routes) and one without. Every answer of the cached server must be the
uncached server's answer: the same status, header fields and body, except
for what a cache adds on purpose:

* ``Age`` (and the per-response ``Date``, ``Server``, ``Connection``);
* an ``ETag`` where the app gave none (rush makes a strong one);
* a 304 for an ``If-None-Match`` that names the ETag the cached server gave
  for exactly the body the uncached server answers now;
* a HEAD answered from the GET's entry has the uncached GET's head as its
  reference, as nginx's cache answers HEAD (``proxy_cache_convert_head``):
  an app that refuses HEAD (FastAPI's ``@app.get``) gets no say once the GET
  is stored.

The apps count their calls, so the test also shows that hits happen. The
seed is fixed (``derandomize``) in ``make test``; ``make cache-oracle`` runs
many more examples from a random seed (``RUSH_CACHE_ORACLE_EXAMPLES``). A failure prints the
shrunk sequence as raw requests: a reproduction to paste into a socket.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import GUARD_TIMEOUT, Connection, HTTPResponse, RushServer, ServerFactory, clean_environment

EXAMPLES = int(os.environ.get("RUSH_CACHE_ORACLE_EXAMPLES", "40"))
# A fixed seed in `make test`; a long run (`make cache-oracle`) explores anew.
FIXED_SEED = "RUSH_CACHE_ORACLE_EXAMPLES" not in os.environ

# What each app serves, and how the cached twin is started.
APPS = {
    "fastapi": (
        "tests.apps.cache_keyed:app",
        [
            "/items/1",
            "/items/2",
            "/items/abc",
            "/echo",
            "/gz",
            "/cors",
            "/lang",
            "/file",
            "/ranged",
            "/weak",
            "/whoami",
        ],
        [
            f"--cache={path}:ttl=60"
            for path in ("/items/*", "/echo", "/gz", "/cors", "/lang", "/file", "/ranged", "/weak", "/whoami")
        ],
    ),
    "native": ("tests.apps.cache_keyed:native", ["/items/1", "/items/2", "/items/x%20y", "/echo", "/lang"], []),
    "flask": (
        "tests.apps.cache_keyed:flask_app",
        ["/items/1", "/items/2", "/echo", "/lang"],
        [f"--cache={path}:ttl=60" for path in ("/items/*", "/echo", "/lang")],
    ),
}

# Fields a server or a cache writes per response, never compared.
PER_RESPONSE = {"date", "age", "server", "connection", "keep-alive"}


@dataclass
class Twins:
    """The cached and the uncached server of one app, and what the cached
    one has said: the body it sent with each ETag."""

    cached: RushServer
    uncached: RushServer
    bodies_by_etag: dict[str, bytes] = field(default_factory=dict)
    requests: int = 0


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    http2: bool = False

    @property
    def target(self) -> str:
        if not self.query:
            return self.path
        return self.path + "?" + "&".join(f"{name}={urllib.parse.quote_plus(value)}" for name, value in self.query)

    def raw(self, if_none_match: str | None) -> bytes:
        lines = [f"{self.method} {self.target} HTTP/1.1"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        if if_none_match is not None:
            lines.append(f"If-None-Match: {if_none_match}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()


def optional(name: str, *values: str) -> st.SearchStrategy[tuple[tuple[str, str], ...]]:
    return st.sampled_from([(), *[((name, value),) for value in values]])


def requests_for(paths: list[str]) -> st.SearchStrategy[Request]:
    query = st.lists(
        st.tuples(st.sampled_from(["q", "page", "token", "utm"]), st.sampled_from(["1", "7", "alice-secret", "a b"])),
        max_size=3,
    ).map(tuple)
    headers = st.tuples(
        st.sampled_from([(("Host", "test"),), (("Host", "evil.example"),), (("Host", "test:8080"),)]),
        optional("X-Forwarded-Proto", "https", "http"),
        optional("X-Forwarded-Host", "fwd.example"),
        optional("X-Forwarded-For", "203.0.113.9"),
        optional("Accept-Encoding", "gzip", "identity", "gzip, br"),
        optional("Origin", "https://a.example", "https://b.example", "https://evil.example"),
        optional("Accept-Language", "fr", "en"),
        optional("Range", "bytes=0-4", "bytes=5-"),
        optional("Authorization", "Bearer alice"),
        optional("Cookie", "session=bob"),
    ).map(lambda groups: tuple(pair for group in groups for pair in group))
    methods = st.sampled_from(["GET", "GET", "GET", "HEAD"])
    protocols = st.sampled_from([False, False, True])
    return st.builds(Request, methods, st.sampled_from(paths), query, headers, protocols)


def fetch_h2(server: RushServer, request: Request, if_none_match: str | None) -> HTTPResponse:
    """One request on a new h2c connection (prior knowledge)."""
    fields = dict(request.headers)
    pseudo = [(":method", request.method), (":path", request.target), (":scheme", "http")]
    pseudo.append((":authority", fields.pop("Host")))
    others = [(name.lower(), value) for name, value in fields.items()]
    if if_none_match is not None:
        others.append(("if-none-match", if_none_match))
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    status, headers, body = 0, [], b""
    with socket.create_connection(server.address, timeout=GUARD_TIMEOUT) as sock:
        connection.initiate_connection()
        connection.send_headers(1, pseudo + others, end_stream=True)
        sock.sendall(connection.data_to_send())
        ended = False
        while not ended:
            data = sock.recv(65536)
            assert data, "the connection closed before the answer"
            for event in connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = int(dict(event.headers)[":status"])
                    headers = [(name, value) for name, value in event.headers if not name.startswith(":")]
                elif isinstance(event, h2.events.DataReceived):
                    body += event.data
                    connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                    ended = True
            sock.sendall(connection.data_to_send())
    return HTTPResponse("HTTP/2", status, "", headers, body)


def fetch(server: RushServer, request: Request, if_none_match: str | None) -> HTTPResponse:
    if request.http2:
        return fetch_h2(server, request, if_none_match)
    with Connection(server.address) as connection:
        connection.send(request.raw(if_none_match))
        return connection.read_response(request.method)


def comparable(response: HTTPResponse, drop_etag: bool) -> tuple[int, list[tuple[str, str]], bytes]:
    dropped = PER_RESPONSE | ({"etag"} if drop_etag else set())
    fields = sorted((name.lower(), value) for name, value in response.headers if name.lower() not in dropped)
    return response.status, fields, response.body


def opaque(tag: str) -> str:
    return tag.strip().removeprefix("W/")


def reproduction(sequence: list[tuple[Request, str | None]], index: int) -> str:
    lines = ["requests, in order (the last one differs):"]
    for request, if_none_match in sequence[: index + 1]:
        over = "(h2) " if request.http2 else ""
        lines.append("  " + over + request.raw(if_none_match).decode().replace("\r\n", " | ").rstrip(" |"))
    return "\n".join(lines)


def check(twins: Twins, sequence: list[tuple[Request, str | None]]) -> None:
    for index, (request, if_none_match) in enumerate(sequence):
        reference = fetch(twins.uncached, request, if_none_match)
        answer = fetch(twins.cached, request, if_none_match)
        twins.requests += 1
        if request.method == "HEAD" and answer.header("age") is not None:
            reference = fetch(twins.uncached, dataclasses.replace(request, method="GET"), if_none_match)
            reference.body = b""
        context = f"{reproduction(sequence, index)}\nuncached: {reference!r}\ncached:   {answer!r}"
        tag = answer.header("etag")
        if answer.status == 200 and tag is not None and request.method == "GET":
            twins.bodies_by_etag[opaque(tag)] = answer.body
        if answer.status == 304 and reference.status != 304:
            # Only for the validator the cache gave with this very body.
            assert reference.status == 200, context
            assert if_none_match is not None, context
            assert twins.bodies_by_etag.get(opaque(if_none_match)) == reference.body, context
            if reference.header("etag") is not None:
                assert opaque(reference.header("etag") or "") == opaque(if_none_match), context
            continue
        drop_etag = reference.header("etag") is None
        assert comparable(answer, drop_etag) == comparable(reference, drop_etag), context


def sequences(paths: list[str]) -> st.SearchStrategy[list[tuple[Request, int]]]:
    # If-None-Match: none, a fixed tag, or one the cached server gave (drawn
    # by index from what it has said, once the sequence runs).
    validators = st.sampled_from([-1, -1, -1, -2, -3, 0, 1, 2])
    return st.lists(st.tuples(requests_for(paths), validators), min_size=1, max_size=8)


def resolve_validators(twins: Twins, drawn: list[tuple[Request, int]]) -> list[tuple[Request, str | None]]:
    known = sorted(twins.bodies_by_etag)
    resolved: list[tuple[Request, str | None]] = []
    for request, choice in drawn:
        if choice == -1:
            tag = None
        elif choice == -2:
            tag = 'W/"v1"'
        elif choice == -3:
            tag = '"v1"'
        else:
            tag = known[choice % len(known)] if known else None
        resolved.append((request, tag))
    return resolved


@pytest.mark.parametrize("name", sorted(APPS))
def test_the_cached_server_answers_what_the_uncached_one_does(
    name: str, module_servers: ServerFactory, request: pytest.FixtureRequest
) -> None:
    app, paths, cache_flags = APPS[name]
    twins = Twins(
        module_servers(app, "--http", "auto", "--forwarded-host", *cache_flags),
        module_servers(app, "--http", "auto", "--forwarded-host", env=clean_environment({"NATIVE_UNCACHED": "1"})),
    )

    @settings(
        max_examples=EXAMPLES,
        derandomize=FIXED_SEED,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(sequences(paths))
    def run(drawn: list[tuple[Request, int]]) -> None:
        check(twins, resolve_validators(twins, drawn))

    run()
    cached_calls = call_total(twins.cached)
    uncached_calls = call_total(twins.uncached)
    assert twins.requests >= EXAMPLES
    assert cached_calls < uncached_calls, f"hits happen: {cached_calls} calls cached, {uncached_calls} uncached"


def call_total(server: RushServer) -> int:
    counts = Counter(httpx.get(f"{server.url}/calls", timeout=GUARD_TIMEOUT).json())
    counts.pop("pid", None)
    return sum(counts.values())
