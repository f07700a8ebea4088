"""The native response cache (rush.Cache) over real sockets: hits answered
without calling the handler, the key made of exactly the named query
parameters and headers, what is never stored, expiry, HEAD from the GET
entry, shared large bodies, invalidation, and the bound on its memory."""

from __future__ import annotations

import httpx
import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, request, wait_for


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory) -> RushServer:
    return module_servers("tests.apps.cached:app")


@pytest.fixture
def client(server: RushServer) -> httpx.Client:
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        client.get("/clear")
        yield client


def calls(client: httpx.Client, name: str) -> int:
    return client.get("/calls").json().get(name, 0)


def test_a_hit_is_answered_without_the_handler(client: httpx.Client) -> None:
    first = client.get("/nas/", params={"arch": "x86", "build": "1"})
    second = client.get("/nas/", params={"arch": "x86", "build": "1"})
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    assert calls(client, "nas") == 1
    assert "age" in second.headers and "age" not in first.headers
    assert second.headers["date"]  # the server's own, fresh


def test_the_key_is_exactly_the_named_parameters_and_headers(client: httpx.Client) -> None:
    before = calls(client, "nas")
    client.get("/nas/", params={"arch": "x86", "build": "2"})
    client.get("/nas/", params={"build": "2", "arch": "x86", "utm": "ignored"})
    assert calls(client, "nas") == before + 1, "an unnamed parameter or another order does not split it"
    client.get("/nas/", params={"arch": "arm", "build": "2"})
    assert calls(client, "nas") == before + 2
    other_host = client.get("/nas/", params={"arch": "arm", "build": "2"}, headers={"Host": "other.example"})
    assert other_host.json()["host"] == "other.example", "the host is part of the key"
    assert calls(client, "nas") == before + 3


@pytest.mark.parametrize("path", ["/cookie", "/private", "/missing"])
def test_answers_that_must_not_be_stored_are_not(client: httpx.Client, path: str) -> None:
    name = path.strip("/")
    client.get(path)
    client.get(path)
    assert calls(client, name) == 2


def test_credentials_bypass_the_cache(client: httpx.Client) -> None:
    before = calls(client, "nas")
    client.get("/nas/", params={"arch": "a"})
    client.get("/nas/", params={"arch": "a"}, headers={"Authorization": "Bearer x"})
    client.get("/nas/", params={"arch": "a"}, headers={"Cookie": "session=1"})
    assert calls(client, "nas") == before + 3


def test_an_entry_expires_after_its_ttl(client: httpx.Client) -> None:
    first = client.get("/short").text
    assert client.get("/short").text == first
    # Polls until the 0.2 s TTL has passed: the next answer is a new one.
    wait_for(lambda: client.get("/short").text != first, "the entry to expire")


def test_head_uses_the_get_entry(server: RushServer, client: httpx.Client) -> None:
    with server.connect() as connection:
        connection.send(request("GET", "/nas/?arch=head"))
        get = connection.read_response()
        before = calls(client, "nas")
        connection.send(request("HEAD", "/nas/?arch=head"))
        head = connection.read_response("HEAD")
    assert head.status == 200 and head.body == b""
    assert head.header("content-length") == get.header("content-length")
    assert head.header("age") is not None
    assert calls(client, "nas") == before


def test_async_handlers_and_large_bodies_are_cached(client: httpx.Client) -> None:
    assert client.get("/async").text == client.get("/async").text == "async"
    assert calls(client, "async") == 1
    first, second = client.get("/big"), client.get("/big")
    assert first.content == second.content == b"b" * (100 * 1024)
    assert calls(client, "big") == 1


def test_clear_and_invalidate(client: httpx.Client) -> None:
    start = calls(client, "nas")
    client.get("/nas/", params={"arch": "inv"})
    client.get("/invalidate", params={"pattern": "/nas/"})
    client.get("/nas/", params={"arch": "inv"})
    assert calls(client, "nas") == start + 2
    before = calls(client, "nas")
    client.get("/nas/", params={"arch": "inv"})
    assert calls(client, "nas") == before
    client.get("/clear")
    client.get("/nas/", params={"arch": "inv"})
    assert calls(client, "nas") == before + 1


def test_the_cache_is_bounded_by_bytes_under_many_keys(server: RushServer, client: httpx.Client) -> None:
    # 3,000 distinct keys of 1 KB answers against a 1 MiB bound.
    with server.connect() as connection:
        for start in range(0, 3000, 100):
            connection.send(b"".join(request("GET", f"/many?key={index}") for index in range(start, start + 100)))
            assert all(response.status == 200 for response in connection.read_responses(100))
    stats = client.get("/stats").json()
    assert stats["bytes"] <= 1024 * 1024, stats
    assert 0 < stats["entries"] < 1000, stats
