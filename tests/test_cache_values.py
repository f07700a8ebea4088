"""The response cache keeps answers as values, so every protocol answers from
it (issues 21 and 24), over real sockets:

* HTTP/2 hits: a cached route asked over h2 runs its handler once; the hit
  carries ``Age`` and the first answer's body and fields; a 304 for a
  matching ``If-None-Match``, ``Vary`` variants, HEAD, and one entry shared
  by HTTP/1.1 and HTTP/2 requests; for the rush App, FastAPI and Flask
  (tests/apps/cache_keyed.py).
* Single flight across protocols: concurrent misses of one key on HTTP/2
  streams (many on one connection, and on a second one) and on HTTP/1.1
  connections run the handler once (tests/apps/cached_flight.py).
* Detached refresh of a stale answer: the request that finds the answer
  expired gets it at once while the handler is held (the test holds it with
  a file and releases it only after that answer arrived), the handler runs
  once, and the refreshed answer is served after; a refresh that fails
  keeps the stale answer and is logged; for each interface that can be cached
  (tests/apps/cached_refresh.py)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, request, wait_for

from tests.apps.cached_flight import CACHE_FLAGS as FLIGHT_FLAGS
from tests.apps.cached_refresh import CACHE_FLAGS as REFRESH_FLAGS

# name: (app, extra flags, the /calls counter of its /lang handler)
LANG_APPS = {
    "app": ("tests.apps.cache_keyed:native", [], "native_lang"),
    "fastapi": ("tests.apps.cache_keyed:app", ["--cache", "/lang:ttl=60"], "lang"),
    "flask": ("tests.apps.cache_keyed:flask_app", ["--cache", "/lang:ttl=60"], "flask_lang"),
}


def h2_client(server: RushServer) -> httpx.Client:
    """HTTP/2 with prior knowledge over cleartext (h2c)."""
    return httpx.Client(base_url=server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT)


def comparable(headers: httpx.Headers) -> dict[str, str]:
    """The fields a hit must repeat: all but its own Date and Age."""
    return {name: value for name, value in headers.items() if name not in ("date", "age")}


@pytest.mark.parametrize("interface", sorted(LANG_APPS))
def test_hits_over_http2_are_answered_from_the_cache(rush_server: ServerFactory, interface: str) -> None:
    app, flags, counter = LANG_APPS[interface]
    server = rush_server(app, "--http", "auto", *flags)
    french = {"accept-language": "fr"}
    with h2_client(server) as h2c, httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as h1c:

        def calls() -> int:
            return int(h1c.get("/calls").json().get(counter, 0))

        first = h2c.get("/lang", headers=french)
        assert first.http_version == "HTTP/2" and first.status_code == 200
        assert first.text == "bonjour"
        second = h2c.get("/lang", headers=french)
        assert calls() == 1, "the second h2 request was a hit"
        assert second.http_version == "HTTP/2" and "age" in second.headers and "age" not in first.headers
        assert second.content == first.content
        etag = second.headers["etag"]
        if interface == "app":
            # A whole answer (the App's) carries the cache's ETag already.
            assert first.headers.get("etag") == etag
        if "etag" in first.headers:
            assert comparable(second.headers) == comparable(first.headers)
        else:
            # An answer framed before it was complete (sent with send_head)
            # cannot gain the cache's ETag over h2; the hit has it.
            assert comparable(second.headers) == {**comparable(first.headers), "etag": etag}

        not_modified = h2c.get("/lang", headers={**french, "if-none-match": etag})
        assert not_modified.status_code == 304 and not_modified.content == b""
        assert not_modified.headers["etag"] == etag and "age" in not_modified.headers

        head = h2c.head("/lang", headers=french)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(first.content)) and "age" in head.headers

        english = h2c.get("/lang", headers={"accept-language": "en"})
        assert english.text == "hello" and "age" not in english.headers, "another variant: a miss"
        assert calls() == 2
        again = h2c.get("/lang", headers={"accept-language": "en"})
        assert again.text == "hello" and "age" in again.headers

        over_http1 = h1c.get("/lang", headers=french)
        assert over_http1.http_version == "HTTP/1.1" and over_http1.content == first.content
        assert "age" in over_http1.headers and over_http1.headers["etag"] == etag
        assert calls() == 2, "HTTP/1.1 and HTTP/2 share the entry"


def test_an_http1_fill_is_a_hit_over_http2(rush_server: ServerFactory) -> None:
    server = rush_server("tests.apps.cache_keyed:native", "--http", "auto")
    with h2_client(server) as h2c, httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as h1c:
        first = h1c.get("/items/7?q=x")
        hit = h2c.get("/items/7?q=x")
        assert hit.http_version == "HTTP/2" and "age" in hit.headers
        assert hit.json() == first.json() == {"item_id": "7", "q": "x"}
        assert comparable(hit.headers) == comparable(first.headers)
        assert h1c.get("/calls").json()["native"] == 1


class H2Streams:
    """One HTTP/2 connection (h2c) on which many GETs are opened at once."""

    def __init__(self, port: int) -> None:
        self.authority = f"127.0.0.1:{port}"
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=GUARD_TIMEOUT)
        self.connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.connection.initiate_connection()
        self.sock.sendall(self.connection.data_to_send())

    def get(self, path: str) -> int:
        stream = self.connection.get_next_available_stream_id()
        fields = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", self.authority)]
        self.connection.send_headers(stream, fields, end_stream=True)
        self.sock.sendall(self.connection.data_to_send())
        return stream

    def responses(self, streams: list[int]) -> dict[int, tuple[int, bytes]]:
        statuses: dict[int, int] = {}
        bodies: dict[int, bytes] = {stream: b"" for stream in streams}
        ended: set[int] = set()
        while not ended >= set(streams):
            data = self.sock.recv(65536)
            assert data, "the connection closed before every stream was answered"
            for event in self.connection.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    statuses[event.stream_id] = int(dict(event.headers)[b":status"])
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    ended.add(event.stream_id)
                elif isinstance(event, h2.events.StreamReset):
                    pytest.fail(f"stream {event.stream_id} was reset")
            self.sock.sendall(self.connection.data_to_send())
        return {stream: (statuses[stream], bodies[stream]) for stream in streams}

    def close(self) -> None:
        self.sock.close()


FLIGHT_APPS = {
    "app": ("tests.apps.cached_flight:app", []),
    "wsgi": ("tests.apps.cached_flight:wsgi_app", ["--threads", "4", *FLIGHT_FLAGS]),
    "asgi": ("tests.apps.cached_flight:asgi_app", FLIGHT_FLAGS),
}


@pytest.mark.parametrize("interface", sorted(FLIGHT_APPS))
def test_concurrent_misses_over_both_protocols_run_the_handler_once(rush_server: ServerFactory, interface: str) -> None:
    app, flags = FLIGHT_APPS[interface]
    server = rush_server(app, "--http", "auto", *flags)
    path = "/slow?k=both-protocols"
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as control, contextlib.ExitStack() as stack:

        def stat(path: str, name: str) -> int:
            return int(control.get(path).json().get(name, 0))

        host = control.base_url.netloc.decode()
        control.get("/gate/close")
        h1_connections = [stack.enter_context(server.connect()) for _ in range(10)]
        crowded, second = H2Streams(server.port), H2Streams(server.port)
        stack.callback(crowded.close)
        stack.callback(second.close)
        assert crowded.authority == host
        for connection in h1_connections[:5]:
            connection.send(request("GET", path, host=host))
        crowded_streams = [crowded.get(path) for _ in range(30)]
        second_streams = [second.get(path) for _ in range(10)]
        for connection in h1_connections[5:]:
            connection.send(request("GET", path, host=host))
        # All but the first wait for its answer: 49 of the 50.
        wait_for(lambda: stat("/stats", "coalesced") >= 49, "49 requests waiting for the first one's answer")
        assert stat("/calls", "slow") == 1
        # While they wait, the other streams of their connection are answered.
        other = crowded.get("/calls")
        assert crowded.responses([other])[other][0] == 200
        control.get("/gate/open")
        answers = [connection.read_response() for connection in h1_connections]
        answers_h2 = {**crowded.responses(crowded_streams), **second.responses(second_streams)}
        assert stat("/calls", "slow") == 1
    assert {answer.status for answer in answers} == {200}
    assert {status for status, _ in answers_h2.values()} == {200}
    bodies = {answer.body for answer in answers} | {body for _, body in answers_h2.values()}
    assert len(bodies) == 1, "one answer for all"


REFRESH_APPS = {
    "app-sync": ("tests.apps.cached_refresh:app", []),
    "app-async": ("tests.apps.cached_refresh:async_app", []),
    "wsgi-loop": ("tests.apps.cached_refresh:wsgi_app", REFRESH_FLAGS),
    "wsgi-threads": ("tests.apps.cached_refresh:wsgi_app", ["--threads", "2", *REFRESH_FLAGS]),
    "asgi": ("tests.apps.cached_refresh:asgi_app", REFRESH_FLAGS),
}
# A sync handler on the loop (the App's, WSGI without --threads) holds the
# whole worker while it runs: nothing else is answered meanwhile.
HOLDS_THE_LOOP = {"app-sync", "wsgi-loop"}


@pytest.fixture(scope="module", params=sorted(REFRESH_APPS))
def refresh_server(request: pytest.FixtureRequest, module_servers: ServerFactory) -> tuple[str, RushServer]:
    app, flags = REFRESH_APPS[request.param]
    return request.param, module_servers(app, "--http", "auto", *flags)


@contextlib.contextmanager
def held_handler(directory: Path) -> Iterator[None]:
    """The handler waits while this is open (and at most its own guard)."""
    hold = directory / "hold"
    hold.touch()
    try:
        yield
    finally:
        hold.unlink(missing_ok=True)


@pytest.mark.parametrize("protocol", ["http1", "http2"])
def test_a_stale_answer_is_served_at_once_while_one_detached_refresh_runs(
    refresh_server: tuple[str, RushServer], tmp_path: Path, protocol: str
) -> None:
    interface, server = refresh_server
    version = tmp_path / "version"
    version.write_text("1")
    path = f"/held?dir={tmp_path}"
    client = h2_client(server) if protocol == "http2" else httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT)
    with client, httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as control:

        def calls() -> int:
            return int(control.get("/calls").json().get("held", 0))

        before = calls()
        first = client.get(path)
        assert first.text == "version 1" and calls() == before + 1
        version.write_text("2")
        with held_handler(tmp_path):
            stale = client.get(path)
            # Answered while the handler is held: before the refresh ran.
            assert stale.status_code == 200 and stale.text == "version 1" and "age" in stale.headers
            if interface not in HOLDS_THE_LOOP:
                wait_for(lambda: calls() == before + 2, "the detached refresh to call the handler")
                again = client.get(path)
                assert again.text == "version 1", "stale while the refresh runs"
                assert calls() == before + 2, "one refresh per entry"
        wait_for(lambda: client.get(path).text == "version 2", "the refreshed answer")
        fresh = client.get(path)
        assert fresh.text == "version 2" and "age" in fresh.headers
        assert calls() == before + 2, "the handler ran once for the refresh"


def test_a_failed_detached_refresh_keeps_serving_the_stale_answer(
    refresh_server: tuple[str, RushServer], tmp_path: Path
) -> None:
    _, server = refresh_server
    version = tmp_path / "version"
    version.write_text("1")
    path = f"/held?dir={tmp_path}"
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:

        def calls() -> int:
            return int(client.get("/calls").json().get("held", 0))

        before = calls()
        first = client.get(path)
        version.write_text("fail")
        with held_handler(tmp_path):
            stale = client.get(path)
            assert stale.status_code == 200 and stale.content == first.content
        wait_for(lambda: calls() >= before + 2, "the refresh to run")
        wait_for(lambda: "a cache refresh failed (status 500)" in server.stderr_text(), "the failure logged")
        # It answered 500: the stale answer stays (and each stale hit may
        # try again, one refresh at a time).
        for _ in range(3):
            again = client.get(path)
            assert again.status_code == 200 and again.content == first.content and "age" in again.headers
