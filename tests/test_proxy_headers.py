"""Behind a proxy: ``--proxy-headers``, ``--forwarded-allow-ips`` and
``--forwarded-host``, over real sockets, for the rush App, WSGI and ASGI.

Every request comes from 127.0.0.1, which the default trusts; the
"untrusted" cases name another address in ``--forwarded-allow-ips``, so the
same headers from the same peer must be ignored. What an app sees is read
back from the app itself (tests/apps/fronted.py for the rush App, the
WSGI app's ``/environ`` and the ASGI app's ``/scope``), and the access log
is checked for the reported client too.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support import RUSH, RushServer, ServerFactory, clean_environment, request

XFF = [("X-Forwarded-For", "6.6.6.6, 1.2.3.4"), ("X-Forwarded-Proto", "https")]
FORWARDED = [("Forwarded", 'for=6.6.6.6, for="[2001:db8::7]:4711";proto=https;host=example.org')]

# interface -> (app, target, how to read (client host, scheme, host) from the JSON answer)
INTERFACES: dict[str, tuple[str, str, Any]] = {
    "rush": ("fronted", "/origin", lambda j: (j["client"][0] if j["client"] else None, j["scheme"], j["host"])),
    "wsgi": ("wsgi_apps", "/environ", lambda j: (j.get("REMOTE_ADDR"), j["wsgi.url_scheme"], j.get("HTTP_HOST"))),
    "asgi": (
        "asgi_apps",
        "/scope",
        lambda j: (j["client"][0], j["scheme"], dict((k, v) for k, v in j["headers"]).get("host")),
    ),
}


def origin(server: RushServer, interface: str, headers: list[tuple[str, str]]) -> tuple[Any, ...]:
    target, read = INTERFACES[interface][1:]
    with server.connect() as connection:
        connection.send(request("GET", target, headers, host="public.test"))
        return tuple(read(connection.read_response().json()))


def start(rush_server: ServerFactory, interface: str, *args: str, **options: Any) -> RushServer:
    return rush_server(INTERFACES[interface][0], *args, **options)


@pytest.mark.parametrize("interface", INTERFACES)
def test_trusted_peer_x_forwarded(rush_server: ServerFactory, interface: str) -> None:
    server = start(rush_server, interface, "--access-log")
    assert origin(server, interface, XFF) == ("1.2.3.4", "https", "public.test")
    # Without the headers: the peer itself.
    assert origin(server, interface, []) == ("127.0.0.1", "http", "public.test")
    server.wait_for_log(r"\] 1\.2\.3\.4 - \"GET /", stream="stdout")


@pytest.mark.parametrize("interface", INTERFACES)
def test_untrusted_peer_is_ignored(rush_server: ServerFactory, interface: str) -> None:
    server = start(rush_server, interface, "--forwarded-allow-ips", "10.0.0.1,192.168.0.0/16", "--forwarded-host")
    headers = [*XFF, ("X-Forwarded-Host", "evil.test")]
    assert origin(server, interface, headers) == ("127.0.0.1", "http", "public.test")


@pytest.mark.parametrize("interface", INTERFACES)
def test_forwarded_is_exclusive(rush_server: ServerFactory, interface: str) -> None:
    server = start(rush_server, interface, "--proxy-headers", "forwarded", "--forwarded-host")
    both = [*FORWARDED, ("X-Forwarded-For", "9.9.9.9"), ("X-Forwarded-Proto", "http")]
    assert origin(server, interface, both) == ("2001:db8::7", "https", "example.org")
    # The family the proxy does not set is ignored, even from a trusted peer.
    assert origin(server, interface, XFF) == ("127.0.0.1", "http", "public.test")
    plain = start(rush_server, interface)
    assert origin(plain, interface, FORWARDED) == ("127.0.0.1", "http", "public.test")


@pytest.mark.parametrize("interface", INTERFACES)
def test_forwarded_host_and_port_only_when_asked(rush_server: ServerFactory, interface: str) -> None:
    headers = [*XFF, ("X-Forwarded-Host", "shop.example"), ("X-Forwarded-Port", "8443")]
    server = start(rush_server, interface)
    assert origin(server, interface, headers)[2] == "public.test"
    asked = start(rush_server, interface, env=clean_environment({"RUSH_FORWARDED_HOST": "1"}))
    assert origin(asked, interface, headers) == ("1.2.3.4", "https", "shop.example:8443")


@pytest.mark.parametrize("interface", INTERFACES)
def test_no_proxy_headers(rush_server: ServerFactory, interface: str) -> None:
    server = start(rush_server, interface, "--no-proxy-headers", "--forwarded-allow-ips", "*")
    assert origin(server, interface, XFF) == ("127.0.0.1", "http", "public.test")


def test_every_hop_trusted_gives_the_leftmost(rush_server: ServerFactory) -> None:
    server = start(rush_server, "rush", "--forwarded-allow-ips", "*")
    assert origin(server, "rush", XFF)[0] == "6.6.6.6"
    networks = start(rush_server, "rush", "--forwarded-allow-ips", "127.0.0.0/8, 1.2.3.0/24")
    assert origin(networks, "rush", XFF)[0] == "6.6.6.6"


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({"RUSH_FORWARDED_ALLOW_IPS": "10.0.0.1"}, ("127.0.0.1", "http", "public.test")),
        ({"FORWARDED_ALLOW_IPS": "10.0.0.1"}, ("127.0.0.1", "http", "public.test")),
        # RUSH_* wins over uvicorn's variable.
        (
            {"RUSH_FORWARDED_ALLOW_IPS": "127.0.0.1", "FORWARDED_ALLOW_IPS": "10.0.0.1"},
            ("1.2.3.4", "https", "public.test"),
        ),
        ({"RUSH_PROXY_HEADERS": "false"}, ("127.0.0.1", "http", "public.test")),
        ({"RUSH_PROXY_HEADERS": "forwarded"}, ("127.0.0.1", "http", "public.test")),
    ],
)
def test_environment_variables(
    rush_server: ServerFactory, variables: dict[str, str], expected: tuple[str, ...]
) -> None:
    server = start(rush_server, "rush", env=clean_environment(variables))
    assert origin(server, "rush", XFF) == expected


def test_fastapi_redirect_behind_tls_points_to_https(rush_server: ServerFactory) -> None:
    server = rush_server("fastapi_app")
    headers = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}
    response = httpx.get(f"{server.url}/items/3/", headers=headers, follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"].startswith("https://")
    untrusted = rush_server("fastapi_app", "--forwarded-allow-ips", "10.0.0.1")
    response = httpx.get(f"{untrusted.url}/items/3/", headers=headers, follow_redirects=False)
    assert response.headers["location"].startswith("http://")


def test_bad_allow_list_is_a_start_up_error(rush_server: ServerFactory) -> None:
    server = rush_server("fronted", "--forwarded-allow-ips", "localhost", wait=False)
    assert server.wait_exit() == 2
    assert "--forwarded-allow-ips takes IP addresses" in server.stderr_text()


def test_the_flag_alone_before_the_app(rush_server: ServerFactory) -> None:
    # `rush --proxy-headers MODULE:APP`: the optional FAMILY must not swallow the app.
    server = rush_server("fronted", command=[str(RUSH), "--proxy-headers"])
    assert server.command_line[1:3] == ["--proxy-headers", "tests.apps.fronted:app"]
    assert origin(server, "rush", XFF) == ("1.2.3.4", "https", "public.test")


@pytest.mark.parametrize("interface", INTERFACES)
def test_a_forwarded_client_that_is_no_address_is_not_believed(rush_server: ServerFactory, interface: str) -> None:
    """An X-Forwarded-For entry that is no address (nor RFC 7239's
    ``unknown`` or an obfuscated id) is no client: it and what stands left
    of it are ignored, as a malformed Forwarded element is, so markup or a
    made-up name never reaches the app or the access log as a client
    address (uvicorn passes such an entry on as it came)."""
    server = start(rush_server, interface, "--access-log", "--forwarded-allow-ips", "127.0.0.1,10.0.0.2")
    hostile = '1.2.3.4"><script>'
    assert origin(server, interface, [("X-Forwarded-For", hostile)])[0] == "127.0.0.1"
    # Behind a trusted proxy that appended its own hop: that proxy is as far as can be told.
    assert origin(server, interface, [("X-Forwarded-For", f"{hostile}, 10.0.0.2")])[0] == "10.0.0.2"
    # A real client right of it still counts.
    assert origin(server, interface, [("X-Forwarded-For", f"{hostile}, 6.6.6.6")])[0] == "6.6.6.6"
    assert origin(server, interface, [("X-Forwarded-For", "evil.test")])[0] == "127.0.0.1"
    server.wait_for_log(r"\] 6\.6\.6\.6 - \"GET /", stream="stdout")
    assert "<script>" not in server.stdout_text() and "evil.test" not in server.stdout_text()
