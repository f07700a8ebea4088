"""Differential tests of the Flask corpus app (apps/flask_app.py) under rush and gunicorn."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from harness import Pair, Side, curl_view, error_lines, httpx_view, read_until, start_pair, wsgi_app_view
from support import ServerFactory, request


@pytest.fixture(scope="module")
def flask(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "flask_app", "wsgi")


def test_session_cookie_round_trip(flask: Pair) -> None:
    def script(side: Side) -> list:
        with httpx.Client(base_url=side.url) as client:
            views = [httpx_view(client.get("/visits")) for _ in range(3)]
            views.append(httpx_view(client.post("/logout")))
            views.append(httpx_view(client.get("/visits")))
        # The session cookie's timestamp and signature are masked by the harness (mask_clock):
        # its payload, the visits counted, is compared.
        return views

    flask.check("session", script)


def test_send_file(flask: Pair) -> None:
    def script(side: Side) -> dict:
        whole = curl_view(side, "/report")
        return {
            "whole": whole,
            "range": curl_view(side, "/report", "-r", "10-19"),
            "if-none-match": curl_view(side, "/report", "-H", f"If-None-Match: {whole['headers']['etag']}"),
            "head": curl_view(side, "/report", "-I"),
        }

    flask.check("send-file", script)


def test_stream_with_context(flask: Pair) -> None:
    def script(side: Side) -> dict:
        response = httpx.get(side.url + "/stream?name=World", headers={"x-diff-id": "stream"})
        events = side.wait_events("stream", lambda events: any("close" in e for e in events), "close()")
        return {"client": httpx_view(response), "app": wsgi_app_view(events)}

    flask.check("stream", script)


def test_each_step_arrives_as_it_is_produced(flask: Pair, tmp_path: Path) -> None:
    """The app's generator produces step N+1 only once the client has seen step N (and says so
    with a marker file): a server holding a chunk back leaves the client waiting (guard timeout)."""

    def script(side: Side) -> list[str]:
        directory = tmp_path / side.name
        directory.mkdir()
        with side.connect() as connection:
            connection.send(request("GET", f"/progress?dir={directory}", [("Connection", "close")]))
            for step in range(3):
                read_until(connection, b"step %d done\n" % step)
                (directory / f"step-{step}").touch()
            read_until(connection, b"finished\n")
        return ["all steps arrived one by one"]

    flask.check("progress", script)


def test_form_post_and_error_page(flask: Pair, tmp_path: Path) -> None:
    upload = tmp_path / "notes.txt"
    upload.write_text("some notes\n")

    def script(side: Side) -> dict:
        return {
            "form": curl_view(side, "/form?x=1", "-F", "name=Ann", "-F", f"doc=@{upload}"),
            "urlencoded": curl_view(side, "/form", "-d", "name=Bob"),
            "missing": curl_view(side, "/missing"),
        }

    flask.check("form", script)


def test_nothing_logged_as_an_error(flask: Pair) -> None:
    """Last in the module: neither server logged an error for what the tests above did."""
    flask.compare("error-log", len(error_lines(flask.rush)), len(error_lines(flask.reference)))
