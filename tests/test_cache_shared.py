"""The response cache's shared second level against a real Redis
(Debian's redis-server, started here on a free loopback port): two rush
servers ("machines") share answers through it, an invalidation drops them
there, and a Redis that is down costs the level, never the route."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support import GUARD_TIMEOUT, ServerFactory, clean_environment, free_port, wait_for

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="redis-server is not installed (make test-tools installs it)"
)


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory: Path = tmp_path_factory.mktemp("redis")
    port = free_port()
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=directory,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    import redis

    client = redis.Redis(port=port)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        wait_for(answers, "redis-server to answer")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(GUARD_TIMEOUT)


def calls(url: str) -> int:
    return httpx.get(f"{url}/calls", timeout=GUARD_TIMEOUT).json().get("item", 0)


# Both servers stand behind one public name, as behind a load balancer: the
# host is part of the key.
PUBLIC = {"Host": "shop.example"}


def item(url: str, item_id: str) -> httpx.Response:
    return httpx.get(f"{url}/item", params={"id": item_id}, headers=PUBLIC, timeout=GUARD_TIMEOUT)


def test_two_servers_share_answers_through_redis(rush_server: ServerFactory, redis_url: str) -> None:
    env = clean_environment({"CACHE_TEST_REDIS": redis_url})
    first = rush_server("tests.apps.cached_shared:app", env=env)
    second = rush_server("tests.apps.cached_shared:app", env=env)
    answer = item(first.url, "7")
    assert answer.status_code == 200 and calls(first.url) == 1
    shared = item(second.url, "7")
    assert shared.content == answer.content, "the second server answers with the first one's body"
    assert calls(second.url) == 0, "without calling its handler"
    assert "age" in shared.headers
    # An invalidation on one server drops the entries in Redis too.
    httpx.get(f"{first.url}/invalidate", timeout=GUARD_TIMEOUT)
    third = rush_server("tests.apps.cached_shared:app", env=env)
    item(third.url, "7")
    assert calls(third.url) == 1, "after the invalidation Redis no longer has it"


def test_each_app_has_its_own_namespace(rush_server: ServerFactory, redis_url: str) -> None:
    import redis

    env = clean_environment({"CACHE_TEST_REDIS": redis_url})
    first = rush_server("tests.apps.cached_shared:app", env=env)
    other = rush_server("tests.apps.cached_shared:other", env=env)
    mine = item(first.url, "8").json()
    theirs = item(other.url, "8").json()
    assert theirs["app"] == "other" and "app" not in mine, "neither app reads the other's answer"
    assert calls(other.url) == 1
    # Names are rush:NAMESPACE:..., the namespace being the import string and a digest of the
    # module's path (the same module here: the import strings tell the two apart).
    names = redis.Redis.from_url(redis_url).keys("*")
    namespaces = {b":".join(name.split(b":")[1:3]).partition(b"@")[0] for name in names}
    assert {b"tests.apps.cached_shared:app", b"tests.apps.cached_shared:other"} <= namespaces, names
    # One app's clear() leaves the other's answers.
    httpx.get(f"{other.url}/clear", timeout=GUARD_TIMEOUT)
    fresh = rush_server("tests.apps.cached_shared:app", env=env)
    assert item(fresh.url, "8").json() == mine
    assert calls(fresh.url) == 0, "its answer is still in Redis"


# Two projects that both say `main:app`, as most do: a cached route of the same pattern and key,
# each answering with its own name.
PROJECT = """
import os
from collections import Counter

from rush import App, Cache, Request

app = App()
calls: Counter[str] = Counter()


@app.get("/item", cache=Cache(ttl=600, vary_query=["id"], shared=os.environ["CACHE_TEST_REDIS"]))
def item(request: Request) -> dict[str, object]:
    calls["item"] += 1
    return {"id": request.query.get("id"), "project": PROJECT_NAME}


@app.get("/calls")
def get_calls(request: Request) -> dict[str, int]:
    return dict(calls)
"""


def project(root: Path, name: str) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "main.py").write_text(f"PROJECT_NAME = {name!r}\n{PROJECT}")
    return directory


def test_two_projects_both_main_app_never_read_each_others_answers(
    rush_server: ServerFactory, redis_url: str, tmp_path: Path
) -> None:
    """The README's promise where the import strings are the same: issue 33 item 5 (the
    namespace was the import string alone, so the shop read the blog's answer)."""
    env = clean_environment({"CACHE_TEST_REDIS": redis_url})
    blog = rush_server("main:app", "--app-dir", project(tmp_path, "blog"), env=env)
    shop = rush_server("main:app", "--app-dir", project(tmp_path, "shop"), env=env)
    assert item(blog.url, "9").json()["project"] == "blog"
    assert item(shop.url, "9").json()["project"] == "shop", "the shop answers with its own body"
    assert calls(shop.url) == 1, "its own handler was called"
    # And the blog, asked again by a second server of its own, still finds its answer in Redis.
    blog_again = rush_server("main:app", "--app-dir", tmp_path / "blog", env=env)
    assert item(blog_again.url, "9").json()["project"] == "blog"
    assert calls(blog_again.url) == 0, "one project served twice from its directory shares"


def test_a_redis_that_is_down_costs_the_level_not_the_route(rush_server: ServerFactory) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    server = rush_server("tests.apps.cached_shared:app", env=clean_environment({"CACHE_TEST_REDIS": down}))
    for index in range(5):
        answer = httpx.get(f"{server.url}/item", params={"id": str(index)}, timeout=GUARD_TIMEOUT)
        assert answer.status_code == 200
    assert calls(server.url) == 5
    log = server.stderr_path.read_text()
    assert log.count("the shared cache") == 1, log
