"""The response cache under concurrency, over real sockets, for the three
interfaces (tests/apps/cached_flight.py): single flight (100 concurrent
misses of one key call the handler once), stale answers served at once while
one refresh runs detached from every client, and a WSGI/ASGI app cached by
``--cache`` alone."""

from __future__ import annotations

import contextlib

import httpx
import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, request, wait_for

from tests.apps.cached_flight import CACHE_FLAGS

INTERFACES = {
    "app": ("tests.apps.cached_flight:app", []),
    "wsgi": ("tests.apps.cached_flight:wsgi_app", ["--threads", "4", *CACHE_FLAGS]),
    "asgi": ("tests.apps.cached_flight:asgi_app", CACHE_FLAGS),
}


@pytest.fixture(scope="module", params=sorted(INTERFACES))
def server(request: pytest.FixtureRequest, module_servers: ServerFactory) -> RushServer:
    app, args = INTERFACES[request.param]
    return module_servers(app, *args)


@pytest.fixture
def client(server: RushServer) -> httpx.Client:
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        yield client
        client.get("/gate/open")


def counter(client: httpx.Client, path: str, name: str) -> int:
    return client.get(path).json().get(name, 0)


def test_concurrent_misses_call_the_handler_once(server: RushServer, client: httpx.Client) -> None:
    calls_before = counter(client, "/calls", "slow")
    coalesced_before = counter(client, "/stats", "coalesced")
    client.get("/gate/close")
    with contextlib.ExitStack() as stack:
        connections = [stack.enter_context(server.connect()) for _ in range(100)]
        for connection in connections:
            connection.send(request("GET", "/slow?k=flight"))
        # All but the first wait for its answer (the stats say when they all arrived).
        wait_for(
            lambda: counter(client, "/stats", "coalesced") - coalesced_before >= 99,
            "99 requests waiting for the first one's answer",
        )
        assert counter(client, "/calls", "slow") == calls_before + 1
        client.get("/gate/open")
        responses = [connection.read_response() for connection in connections]
    assert {response.status for response in responses} == {200}
    assert len({response.body for response in responses}) == 1, "one answer for all"
    assert counter(client, "/calls", "slow") == calls_before + 1


def test_a_parked_request_keeps_its_pipelined_successor_in_order(server: RushServer, client: httpx.Client) -> None:
    client.get("/gate/close")
    with server.connect() as first, server.connect() as second:
        first.send(request("GET", "/slow?k=pipelined"))
        wait_for(lambda: counter(client, "/stats", "fills") >= 1, "the first request to be filling")
        second.send(request("GET", "/slow?k=pipelined") + request("GET", "/slow?k=pipelined-other"))
        wait_for(lambda: counter(client, "/stats", "coalesced") >= 1, "the second request to wait")
        client.get("/gate/open")
        filled = first.read_response()
        waited, other = second.read_responses(2)
    assert filled.body == waited.body
    assert other.body.startswith(b"slow k=pipelined-other") or b"pipelined-other" in other.body


def test_stale_answers_are_served_at_once_while_one_detached_refresh_runs(
    server: RushServer, client: httpx.Client
) -> None:
    first = client.get("/swr")
    assert first.status_code == 200
    calls = counter(client, "/calls", "swr")
    client.get("/gate/close")
    with server.connect() as finder:
        # Expired at once (max-age=0): the request that finds it so gets the
        # stale answer at once, the gate still closed; a refresh detached
        # from it calls the handler, which waits at the gate.
        # The same Host as the httpx client's: the host is part of the key.
        finder.send(request("GET", "/swr", host=client.base_url.netloc.decode()))
        stale = finder.read_response()
    assert stale.status == 200 and stale.body == first.content
    wait_for(lambda: counter(client, "/calls", "swr") == calls + 1, "the refresh to start")
    # Meanwhile everyone else gets the stale answer too, and no second refresh starts.
    again = client.get("/swr")
    assert again.status_code == 200 and again.content == first.content
    assert counter(client, "/calls", "swr") == calls + 1
    client.get("/gate/open")
    wait_for(lambda: client.get("/swr").content != first.content, "the refreshed answer")


def test_waiting_requests_go_to_the_handler_after_the_lock_timeout(server: RushServer, client: httpx.Client) -> None:
    calls = counter(client, "/calls", "locked")
    client.get("/gate/close")
    with server.connect() as first, server.connect() as second:
        first.send(request("GET", "/locked"))
        wait_for(lambda: counter(client, "/calls", "locked") == calls + 1, "the first request in its handler")
        second.send(request("GET", "/locked"))
        # Its fill is held past the 0.5 s lock timeout: the second request calls the handler too.
        wait_for(lambda: counter(client, "/calls", "locked") == calls + 2, "the waiting request to give up waiting")
        client.get("/gate/open")
        assert first.read_response().status == second.read_response().status == 200


@pytest.mark.parametrize("threads", ["0", "2"])
def test_a_wsgi_body_with_close_is_cached(rush_server: ServerFactory, threads: str) -> None:
    """Flask answers with an iterable that has close() (Werkzeug's
    ClosingIterator): on a --cache path it is collected and stored."""
    server = rush_server("tests.apps.cached_flight:wsgi_app", "--threads", threads, *CACHE_FLAGS)
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        first, second = client.get("/closing"), client.get("/closing")
        assert first.content == second.content == b"closing ok!"
        assert "age" in second.headers
        assert counter(client, "/calls", "closing") == 1
