"""Differential tests of `--root-path` (an app mounted under a prefix), against uvicorn and
gunicorn given the same prefix.

The usual set-up (FastAPI's "behind a proxy" page): the proxy serves the app under `/api` and
strips that prefix, so the server gets `/items` and is told `--root-path /api`. uvicorn then puts
the prefix back in front of `path` and `raw_path`, and every URL the app builds from the request
keeps it (`request.url`, Starlette's trailing-slash redirects). rush does the same, except for a
path that already starts with the prefix (a proxy that does not strip it), which uvicorn doubles
(deliberate.toml says why). On the WSGI side gunicorn (`SCRIPT_NAME` in its environment) refuses
a path without the prefix; rush serves it with the prefix as `SCRIPT_NAME`.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from harness import Pair, Side, asgi_app_view, httpx_view, raw_exchange, start_pair, wsgi_app_view
from support import ServerFactory

PREFIX = "/api"


@pytest.fixture(scope="module")
def asgi(module_servers: ServerFactory) -> Pair:
    options = ["--root-path", PREFIX]
    return start_pair(module_servers, "raw_asgi", "asgi", rush_args=options, reference_args=options)


@pytest.fixture(scope="module")
def starlette(module_servers: ServerFactory) -> Pair:
    options = ["--root-path", PREFIX]
    return start_pair(module_servers, "starlette_app", "asgi", rush_args=options, reference_args=options)


@pytest.fixture(scope="module")
def wsgi(module_servers: ServerFactory) -> Pair:
    return start_pair(
        module_servers, "raw_wsgi", "wsgi", rush_args=["--root-path", PREFIX], env={"SCRIPT_NAME": PREFIX}
    )


@pytest.mark.parametrize("target", ["/echo", "/echo/caf%C3%A9?x=1", "/apix", "/api/echo"])
def test_scope_under_a_root_path(asgi: Pair, target: str) -> None:
    """A stripped path gets the prefix back in `path` and `raw_path`; `/apix` is not under
    `/api`; `/api/echo` already carries it (uvicorn doubles it: deliberate)."""

    asgi.check(f"root {target}", tagged_get(target, asgi_app_view))


def test_urls_a_starlette_app_builds(starlette: Pair) -> None:
    """Starlette's redirect of `/report/` to `/report` is built from the request's URL: behind a
    proxy that strips `/api`, it must point at `/api/report`."""

    def script(side: Side) -> list[dict]:
        with httpx.Client(base_url=side.url, follow_redirects=False) as client:
            return [httpx_view(client.get(target)) for target in ("/report/", "/lorem", "/")]

    starlette.check("root-urls", script)


@pytest.mark.parametrize("target", ["/api/echo", "/api"])
def test_environ_under_a_root_path(wsgi: Pair, target: str) -> None:
    """`SCRIPT_NAME` and `PATH_INFO` split at the prefix."""

    wsgi.check(f"root {target}", tagged_get(target, wsgi_app_view))


def test_a_path_without_the_root_path(wsgi: Pair) -> None:
    """A path the proxy stripped of the prefix (`/write`): gunicorn answers 500 ("Configuration problem")
    without calling the app; rush calls it with the prefix as `SCRIPT_NAME` (deliberate)."""

    def script(side: Side) -> dict:
        return {"status": raw_exchange(side, "GET", "/write", [("x-diff-id", "stripped")])["status"]}

    rush_view, _ = wsgi.check("root-stripped", script)
    assert rush_view == {"status": 200}
    environ = wsgi_app_view(wsgi.rush.wait_finished("stripped"))["environ"]
    assert (environ["SCRIPT_NAME"], environ["PATH_INFO"]) == (PREFIX, "/write")


def tagged_get(target: str, app_view: Callable[[list[dict]], dict]) -> Callable[[Side], dict]:
    """A script: GET ``target`` tagged, then what the client got and what the app saw."""

    def script(side: Side) -> dict:
        tag = f"root {target}"
        client = raw_exchange(side, "GET", target, [("x-diff-id", tag)])
        return {"client": client, "app": app_view(side.wait_finished(tag))}

    return script
