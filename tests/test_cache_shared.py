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


def test_two_servers_share_answers_through_redis(rush_server: ServerFactory, redis_url: str) -> None:
    env = clean_environment({"CACHE_TEST_REDIS": redis_url})
    first = rush_server("tests.apps.cached_shared:app", env=env)
    second = rush_server("tests.apps.cached_shared:app", env=env)
    answer = httpx.get(f"{first.url}/item", params={"id": "7"}, timeout=GUARD_TIMEOUT)
    assert answer.status_code == 200 and calls(first.url) == 1
    shared = httpx.get(f"{second.url}/item", params={"id": "7"}, timeout=GUARD_TIMEOUT)
    assert shared.content == answer.content, "the second server answers with the first one's body"
    assert calls(second.url) == 0, "without calling its handler"
    assert "age" in shared.headers
    # An invalidation on one server drops the entries in Redis too.
    httpx.get(f"{first.url}/invalidate", timeout=GUARD_TIMEOUT)
    third = rush_server("tests.apps.cached_shared:app", env=env)
    httpx.get(f"{third.url}/item", params={"id": "7"}, timeout=GUARD_TIMEOUT)
    assert calls(third.url) == 1, "after the invalidation Redis no longer has it"


def test_a_redis_that_is_down_costs_the_level_not_the_route(rush_server: ServerFactory) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    server = rush_server("tests.apps.cached_shared:app", env=clean_environment({"CACHE_TEST_REDIS": down}))
    for index in range(5):
        answer = httpx.get(f"{server.url}/item", params={"id": str(index)}, timeout=GUARD_TIMEOUT)
        assert answer.status_code == 200
    assert calls(server.url) == 5
    log = server.stderr_path.read_text()
    assert log.count("the shared cache") == 1, log
