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
    # 100,000 distinct keys of 1 KB answers against a 1 MiB bound.
    with server.connect() as connection:
        for start in range(0, 100_000, 500):
            connection.send(b"".join(request("GET", f"/many?key={index}") for index in range(start, start + 500)))
            assert all(response.status == 200 for response in connection.read_responses(500))
    stats = client.get("/stats").json()
    assert stats["bytes"] <= 1024 * 1024, stats
    assert 0 < stats["entries"] < 1000, stats


def test_a_cached_answer_carries_a_strong_etag_and_answers_if_none_match_with_304(client: httpx.Client) -> None:
    first = client.get("/nas/", params={"arch": "etag"})
    etag = first.headers["etag"]
    assert etag.startswith('"') and not etag.startswith("W/")
    before = calls(client, "nas")
    revalidated = client.get("/nas/", params={"arch": "etag"}, headers={"If-None-Match": f'"other", {etag}'})
    assert revalidated.status_code == 304 and revalidated.content == b""
    assert revalidated.headers["etag"] == etag and "age" in revalidated.headers
    changed = client.get("/nas/", params={"arch": "etag"}, headers={"If-None-Match": '"other"'})
    assert changed.status_code == 200 and changed.content == first.content
    assert calls(client, "nas") == before


def test_a_failed_refresh_serves_the_stale_answer(client: httpx.Client) -> None:
    # /flaky answers with max-age=0: stale at once, within its stale=600 window.
    first = client.get("/flaky")
    assert first.status_code == 200
    client.get("/flaky-fail")
    before = calls(client, "flaky")
    again = client.get("/flaky")
    assert calls(client, "flaky") == before + 1, "the stale answer was refreshed"
    assert again.status_code == 200 and again.content == first.content, "stale-if-error"


def test_invalidating_one_entry_leaves_the_others(client: httpx.Client) -> None:
    for arch in ("one", "two"):
        client.get("/nas/", params={"arch": arch, "build": "1"})
        client.get("/nas/", params={"arch": arch, "build": "1"}, headers={"Host": "other.example"})
    before = calls(client, "nas")
    client.get("/invalidate", params={"pattern": "/nas/", "arch": "one", "build": "1"})
    client.get("/nas/", params={"arch": "two", "build": "1"})
    assert calls(client, "nas") == before, "another entry stays"
    client.get("/nas/", params={"arch": "one", "build": "1"})
    client.get("/nas/", params={"arch": "one", "build": "1"}, headers={"Host": "other.example"})
    assert calls(client, "nas") == before + 2, "the entry is gone whatever the host"


def test_invalidation_reaches_every_worker(rush_server: ServerFactory) -> None:
    server = rush_server("tests.apps.cached:app", "--workers", "2")

    def answers_by_worker() -> dict[int, int]:
        """The cached call number of each worker, by PID (new connections
        until both workers have answered twice)."""
        seen: dict[int, list[int]] = {}
        for _ in range(400):
            with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as fresh:
                answer = fresh.get("/pid").json()
            seen.setdefault(answer["pid"], []).append(answer["call"])
            if len(seen) == 2 and all(len(calls) >= 2 for calls in seen.values()):
                break
        assert len(seen) == 2, f"both workers should answer: {seen}"
        for pid, numbers in seen.items():
            assert len(set(numbers[1:])) == 1, f"worker {pid} answers from its cache after its first call"
        return {pid: numbers[-1] for pid, numbers in seen.items()}

    cached = answers_by_worker()
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as one:
        one.get("/invalidate", params={"pattern": "/pid"})
    after = answers_by_worker()
    assert after.keys() == cached.keys()
    for pid in cached:
        assert after[pid] > cached[pid], f"worker {pid} called its handler again after the invalidation"
