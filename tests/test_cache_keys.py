"""The response cache never serves one request's answer to another: each
fault of issue 21 over real sockets, with real framework apps
(tests/apps/cache_keyed.py) served with ``--cache``.

The key is the scheme and host the app sees (after a trusted proxy's
headers), the path and the whole query; the app's own ``Vary`` splits an
entry into variants; a 206 is never stored and a Range request never
answered from a whole answer's entry; ``If-None-Match`` compares weakly."""

from __future__ import annotations

import httpx
import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory

CACHE_ALL = [
    "--cache",
    "/items/*:ttl=60",
    "--cache",
    "/echo:ttl=60",
    "--cache",
    "/gz:ttl=60",
    "--cache",
    "/cors:ttl=60",
    "--cache",
    "/lang:ttl=60",
    "--cache",
    "/file:ttl=60",
    "--cache",
    "/weak:ttl=60",
    "--cache",
    "/ranged:ttl=60",
]


@pytest.fixture(scope="module")
def server(module_servers: ServerFactory) -> RushServer:
    return module_servers("tests.apps.cache_keyed:app", *CACHE_ALL)


@pytest.fixture(scope="module")
def native(module_servers: ServerFactory) -> RushServer:
    return module_servers("tests.apps.cache_keyed:native")


@pytest.fixture
def client(server: RushServer) -> httpx.Client:
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        yield client


def calls(client: httpx.Client, name: str) -> int:
    return client.get("/calls").json().get(name, 0)


def test_each_path_under_a_prefix_is_its_own_entry(client: httpx.Client) -> None:
    assert client.get("/items/1").json() == {"item_id": 1, "q": None}
    assert client.get("/items/2").json() == {"item_id": 2, "q": None}
    assert client.get("/items/abc").status_code == 422
    before = calls(client, "items")
    again = client.get("/items/2")
    assert again.json()["item_id"] == 2 and "age" in again.headers
    assert calls(client, "items") == before, "a hit after all"


def test_each_path_parameter_of_an_app_route_is_its_own_entry(native: RushServer) -> None:
    with httpx.Client(base_url=native.url, timeout=GUARD_TIMEOUT) as client:
        assert client.get("/items/1").json() == {"item_id": "1", "q": None}
        assert client.get("/items/2").json() == {"item_id": "2", "q": None}
        assert client.get("/items/1").headers.get("age") is not None
        assert client.get("/calls").json()["native"] == 2


def test_the_whole_query_is_in_the_key(client: httpx.Client) -> None:
    secret = client.get("/items/5", params={"token": "alice-secret", "q": "7"}).json()
    assert secret == {"item_id": 5, "q": "7"}
    assert client.get("/items/5", params={"q": "1"}).json() == {"item_id": 5, "q": "1"}
    echo = client.get("/echo?token=alice-secret&page=7").json()
    assert client.get("/echo?page=1").json()["query"] == [["page", "1"]]
    assert echo["query"] == [["page", "7"], ["token", "alice-secret"]]


def test_the_host_is_in_the_key(client: httpx.Client) -> None:
    evil = client.get("/echo", headers={"Host": "evil.example"}).json()
    assert evil["link"] == "http://evil.example/echo"
    own = client.get("/echo").json()
    assert "evil" not in own["link"] and own["host"] != "evil.example"


def test_a_trusted_proxys_scheme_is_in_the_key(client: httpx.Client) -> None:
    # The test client is on loopback: a trusted proxy by default.
    forwarded = client.get("/echo?via=proxy", headers={"X-Forwarded-Proto": "https"}).json()
    assert forwarded["scheme"] == "https"
    plain = client.get("/echo?via=proxy").json()
    assert plain["scheme"] == "http" and plain["link"].startswith("http://")


def test_forwarded_host_keys_on_the_host_the_app_saw(rush_server: ServerFactory) -> None:
    server = rush_server("tests.apps.cache_keyed:app", "--forwarded-host", "--cache", "/echo:ttl=60")
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        one = client.get("/echo", headers={"X-Forwarded-Host": "one.example"}).json()
        two = client.get("/echo", headers={"X-Forwarded-Host": "two.example"}).json()
        assert (one["host"], two["host"]) == ("one.example", "two.example")
        assert client.get("/echo", headers={"X-Forwarded-Host": "one.example"}).json() == one
        assert calls(client, "echo") == 2


def test_gzip_is_only_served_to_clients_that_accept_it(client: httpx.Client) -> None:
    zipped = client.get("/gz", headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    plain = client.get("/gz", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers
    assert plain.content == b"compressible " * 64
    assert client.get("/gz", headers={"Accept-Encoding": "gzip"}).headers.get("age") is not None
    assert client.get("/gz", headers={"Accept-Encoding": "identity"}).headers.get("age") is not None
    assert calls(client, "gz") == 2


def test_vary_origin_keeps_each_origins_cors_answer(client: httpx.Client) -> None:
    a = client.get("/cors", headers={"Origin": "https://a.example"})
    b = client.get("/cors", headers={"Origin": "https://b.example"})
    assert a.headers["access-control-allow-origin"] == "https://a.example"
    assert b.headers["access-control-allow-origin"] == "https://b.example"
    none = client.get("/cors")
    assert "access-control-allow-origin" not in none.headers


def test_vary_accept_language(client: httpx.Client) -> None:
    assert client.get("/lang", headers={"Accept-Language": "fr"}).text == "bonjour"
    assert client.get("/lang", headers={"Accept-Language": "en"}).text == "hello"
    assert client.get("/lang", headers={"Accept-Language": "fr"}).text == "bonjour"


def test_a_range_request_never_poisons_the_entry(client: httpx.Client) -> None:
    part = client.get("/ranged", headers={"Range": "bytes=0-4"})
    assert part.status_code == 206 and part.content == b"01234"
    whole = client.get("/ranged")
    assert whole.status_code == 200 and whole.content == b"0123456789abcdef"
    assert "content-range" not in whole.headers
    assert client.get("/ranged").headers.get("age") is not None, "the whole answer is stored"
    again = client.get("/ranged", headers={"Range": "bytes=2-3"})
    assert again.status_code == 206 and again.content == b"23", "a range is the app's, never the entry's"


def test_a_starlette_file_response_with_ranges(client: httpx.Client) -> None:
    identity = {"Accept-Encoding": "identity"}  # the app's GZipMiddleware stays out of it
    part = client.get("/file", headers={"Range": "bytes=0-4", **identity})
    assert part.status_code == 206 and len(part.content) == 5
    whole = client.get("/file", headers=identity)
    assert whole.status_code == 200 and "content-range" not in whole.headers
    assert len(whole.content) == int(whole.headers["content-length"]) > 5
    again = client.get("/file", headers={"Range": "bytes=0-4", **identity})
    assert again.status_code == 206 and again.content == whole.content[:5]


def test_a_weak_etag_from_the_app_gets_a_304(client: httpx.Client) -> None:
    first = client.get("/weak")
    assert first.headers["etag"] == 'W/"v1"'
    assert client.get("/weak").headers.get("age") is not None
    assert client.get("/weak", headers={"If-None-Match": 'W/"v1"'}).status_code == 304
    assert client.get("/weak", headers={"If-None-Match": '"v1"'}).status_code == 304
    assert client.get("/weak", headers={"If-None-Match": 'W/"v2"'}).status_code == 200
