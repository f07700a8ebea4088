"""Differential tests of the Starlette and sse-starlette corpus apps (apps/starlette_app.py,
apps/sse_app.py) under rush and uvicorn."""

from __future__ import annotations

import httpx
import pytest
from harness import (
    Pair,
    Side,
    asgi_app_view,
    curl_view,
    httpx_view,
    raw_exchange,
    read_until,
    start_pair,
    stop_and_get_lifespan,
)
from support import ServerFactory, request


@pytest.fixture(scope="module")
def site(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "starlette_app", "asgi")


@pytest.fixture(scope="module")
def sse(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "sse_app", "asgi")


def test_lifespan_state(site: Pair) -> None:
    site.check("state", lambda side: httpx_view(httpx.get(side.url + "/?a=1")))


def test_file_response_with_curl(site: Pair) -> None:
    def script(side: Side) -> dict:
        whole = curl_view(side, "/report")
        etag = whole["headers"]["etag"]
        modified = whole["headers"]["last-modified"]
        ranges = curl_view(side, "/report", "-r", "0-9,50-59")
        # The multipart boundary is random per response.
        boundary = ranges["headers"]["content-type"].partition("boundary=")[2]
        ranges = {**ranges, "body": ranges["body"].replace(boundary, "B")}
        ranges["headers"] = {
            **ranges["headers"],
            "content-type": ranges["headers"]["content-type"].replace(boundary, "B"),
        }
        return {
            "whole": whole,
            "head": curl_view(side, "/report", "-I"),
            "range": curl_view(side, "/report", "-r", "100-199"),
            "ranges": ranges,
            "unsatisfiable": curl_view(side, "/report", "-r", "999999-"),
            "if-none-match": curl_view(side, "/report", "-H", f"If-None-Match: {etag}"),
            "if-modified-since": curl_view(side, "/report", "-H", f"If-Modified-Since: {modified}"),
        }

    rush_view, _ = site.check("file", script)
    assert rush_view["range"]["status"] == 206


def test_gzip_middleware(site: Pair) -> None:
    def script(side: Side) -> dict:
        return {
            "gzip": raw_exchange(side, "GET", "/lorem", [("Accept-Encoding", "gzip")]),
            "identity": raw_exchange(side, "GET", "/lorem"),
            "curl-compressed": curl_view(side, "/lorem", "--compressed"),
        }

    site.check("gzip", script)


def test_file_response_is_offered_pathsend(site: Pair) -> None:
    """Starlette's FileResponse sends the path when the server lists the extension; uvicorn lists
    none, so this is not a comparison: rush must list it (issue 20, 'ASGI extensions')."""
    httpx.get(site.rush.url + "/report", headers={"x-diff-id": "pathsend"})
    scope = asgi_app_view(site.rush.wait_finished("pathsend"))["scope"]
    assert "http.response.pathsend" in scope["extensions"]


def test_sse_starlette_streams_until_the_client_leaves(sse: Pair) -> None:
    def script(side: Side) -> dict:
        connection = side.connect()
        connection.send(request("GET", "/numbers", [("x-diff-id", "numbers")]))
        data = read_until(connection, b"data: 8\r\n")
        connection.close()
        events = side.wait_finished("numbers")
        return {
            "first_events": data.partition(b"\r\n\r\n")[2].count(b"event: tick"),
            "app": asgi_app_view(events)["ended"],
        }

    sse.check("numbers", script)


def test_lifespan_conversation(site: Pair, sse: Pair) -> None:
    """Last in the module: stops the servers and compares each app's whole lifespan conversation
    (Starlette's lifespan context manager; sse-starlette's app has the default one)."""
    site.check("lifespan", stop_and_get_lifespan)
    sse.check("lifespan", stop_and_get_lifespan)
