"""What an app sends is checked before it reaches the wire, in all three
interfaces: a status must be final (200-599; a 1xx or a number outside
HTTP's classes is the app's error, a logged 500), a WSGI status line must
read ``NNN reason`` (PEP 3333), and the server's own ``Date`` and ``Allow``
give way to the app's instead of being sent twice. Also: the bytes a
refused client may send while the server lingers are bounded, and a WSGI
app is told the length of a chunked body it gets whole."""

from __future__ import annotations

import socket

import httpx
import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, chunked, request

APP_DATE = "Mon, 01 Jan 2024 00:00:00 GMT"


@pytest.fixture(scope="module")
def native(module_servers: ServerFactory) -> RushServer:
    return module_servers("tests.apps.statuses:app")


@pytest.fixture(scope="module")
def wsgi(module_servers: ServerFactory) -> RushServer:
    return module_servers("tests.apps.statuses:wsgi_app", "--interface", "wsgi")


@pytest.fixture(scope="module")
def asgi(module_servers: ServerFactory) -> RushServer:
    return module_servers("tests.apps.statuses:asgi_app", "--interface", "asgi")


def get(server: RushServer, path: str, **params: str) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", params=params, timeout=GUARD_TIMEOUT)


@pytest.mark.parametrize("code", [200, 201, 404, 599])
def test_final_statuses_pass(native: RushServer, asgi: RushServer, code: int) -> None:
    assert get(native, f"/status/{code}").status_code == code
    assert get(native, f"/set-status/{code}").status_code == code
    assert get(asgi, f"/status/{code}").status_code == code


@pytest.mark.parametrize("code", [0, 99, 100, 101, 103, 199, 600, 999, 2000])
def test_a_status_that_is_not_final_is_a_logged_500(native: RushServer, asgi: RushServer, code: int) -> None:
    for server, path in ((native, f"/status/{code}"), (native, f"/set-status/{code}"), (asgi, f"/status/{code}")):
        response = get(server, path)
        assert response.status_code == 500, (path, response.status_code)
    native.wait_for_log(f"invalid status {code}")
    asgi.wait_for_log(f"status {code} is not a final status")


@pytest.mark.parametrize("line", ["200 OK", "404 Not Found", "201 "])
def test_wsgi_status_lines_per_pep_3333_pass(wsgi: RushServer, line: str) -> None:
    assert get(wsgi, "/status", line=line).status_code == int(line[:3])


@pytest.mark.parametrize(
    "line", ["200", "200OK", "20 OK", "2000 OK", "103 Early Hints", "600 Nope", " 200 OK", "abc OK"]
)
def test_wsgi_status_lines_against_pep_3333_are_a_500(wsgi: RushServer, line: str) -> None:
    assert get(wsgi, "/status", line=line).status_code == 500
    wsgi.wait_for_log("PEP 3333 wants 'NNN reason'")


@pytest.mark.parametrize("interface", ["native", "wsgi", "asgi"])
def test_an_apps_own_date_is_sent_once(interface: str, request: pytest.FixtureRequest) -> None:
    server: RushServer = request.getfixturevalue(interface)
    with server.connect() as connection:
        connection.send(b"GET /date HTTP/1.1\r\nHost: test\r\n\r\n")
        response = connection.read_response()
    assert response.header_list("date") == [APP_DATE]


def test_an_error_handlers_own_allow_is_sent_once(native: RushServer) -> None:
    with native.connect() as connection:
        connection.send(request("GET", "/only-post"))
        response = connection.read_response()
    assert response.status == 405
    assert response.header_list("allow") == ["POST"]


def test_a_refused_client_that_keeps_sending_is_cut_off(native: RushServer) -> None:
    # After a 400 the server lingers, discarding input so the client reads
    # the answer; past 1 MiB discarded it closes, however fast the client
    # sends (before, the bound never triggered and 8 MiB were swallowed).
    with socket.create_connection(native.address, timeout=GUARD_TIMEOUT) as client:
        client.sendall(b"GET / HTTP/1.1\r\nHost: bad host\r\n\r\n")
        with pytest.raises(OSError):
            client.sendall(b"x" * (8 * 1024 * 1024))
            # The close may surface only on the next call.
            client.sendall(b"x" * (1024 * 1024))


def test_a_wsgi_app_gets_the_length_of_a_chunked_body(wsgi: RushServer) -> None:
    with wsgi.connect() as connection:
        connection.send(
            request(
                "POST", "/body", [("Transfer-Encoding", "chunked")], chunked(b"hello ", b"world"), content_length=False
            )
        )
        response = connection.read_response()
    assert response.json() == {"content_length": "11", "body": "hello world"}
