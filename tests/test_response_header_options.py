"""``--server-header``, ``--date-header`` and ``--header NAME:VALUE``, over
real sockets: on the app's answers (rush App, WSGI, ASGI), on rush's own
answers (404, a refused request), and set through ``RUSH_*`` variables."""

from __future__ import annotations

import httpx
import pytest

from tests.support import ServerFactory, clean_environment


def test_defaults_date_and_no_server(rush_server: ServerFactory) -> None:
    server = rush_server("fronted")
    response = httpx.get(f"{server.url}/origin")
    assert "date" in response.headers
    assert "server" not in response.headers


@pytest.mark.parametrize("app", ["fronted", "wsgi_apps", "asgi_apps"])
def test_server_header_extra_headers_and_no_date(rush_server: ServerFactory, app: str) -> None:
    server = rush_server(
        app,
        "--server-header",
        "--no-date-header",
        "--header",
        "X-Frame-Options: DENY",
        "--header",
        "Strict-Transport-Security:max-age=63072000; includeSubDomains",
    )
    for target in ("/origin", "/missing-page"):
        response = httpx.get(f"{server.url}{target}")
        assert response.headers.get_list("server") == ["rush"]
        assert "date" not in response.headers
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["strict-transport-security"] == "max-age=63072000; includeSubDomains"


def test_a_refused_request_carries_them_too(rush_server: ServerFactory) -> None:
    server = rush_server("fronted", "--server-header", "--header", "X-Team: web")
    with server.connect() as connection:
        connection.send(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n")
        response = connection.read_response()
    assert response.status == 400
    assert response.header("server") == "rush"
    assert response.header("x-team") == "web"


def test_the_apps_own_server_and_date_win(rush_server: ServerFactory) -> None:
    server = rush_server("fronted", "--server-header", "--header", "X-Team: web")
    response = httpx.get(f"{server.url}/own-server-header")
    assert response.headers.get_list("server") == ["app/1"]
    assert response.headers.get_list("date") == ["Thu, 01 Jan 1970 00:00:00 GMT"]
    assert response.headers["x-team"] == "web"


def test_environment_variables(rush_server: ServerFactory) -> None:
    variables = {"RUSH_SERVER_HEADER": "1", "RUSH_DATE_HEADER": "false", "RUSH_HEADER": "X-A: 1\nX-B: two words"}
    server = rush_server("fronted", env=clean_environment(variables))
    response = httpx.get(f"{server.url}/origin")
    assert response.headers["server"] == "rush"
    assert "date" not in response.headers
    assert (response.headers["x-a"], response.headers["x-b"]) == ("1", "two words")


@pytest.mark.parametrize("bad", ["NoColon", "Bad Name: x", "X-A: line\rbreak"])
def test_bad_header_is_a_start_up_error(rush_server: ServerFactory, bad: str) -> None:
    server = rush_server("fronted", "--header", bad, wait=False)
    assert server.wait_exit() == 2
    assert "--header takes NAME:VALUE" in server.stderr_text()


def test_cached_answers_carry_them_once(rush_server: ServerFactory) -> None:
    server = rush_server("tests.apps.cached:app", "--server-header", "--header", "X-Team: web")
    for expect_age in (False, True):
        response = httpx.get(f"{server.url}/nas/", params={"arch": "x86", "build": "1"})
        assert ("age" in response.headers) == expect_age
        assert response.headers.get_list("server") == ["rush"]
        assert response.headers.get_list("x-team") == ["web"]
        assert len(response.headers.get_list("date")) == 1
