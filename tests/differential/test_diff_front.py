"""Differential tests of what an app behind a reverse proxy computes (its client, scheme, own
URL, the URLs it builds) under rush and under the server users migrate from, given the
equivalent options: uvicorn ``--proxy-headers --forwarded-allow-ips`` for ASGI, gunicorn
``--forwarded-allow-ips`` with werkzeug's ``ProxyFix`` for WSGI (rush: ``--forwarded-host``).

The app is apps/front_app.py (Starlette and Flask); the client is a raw socket from 127.0.0.1
sending the header shapes proxies (and clients posing as proxies) send. Where rush reads a
shape differently on purpose, deliberate.toml says why.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from harness import Pair, ReferenceServer, Side, start_pair
from support import (
    GUARD_TIMEOUT,
    RUSH,
    VENV_BIN,
    RushServer,
    ServerFactory,
    clean_environment,
    request,
    write_localhost_pki,
)
from websockets.sync.client import connect

Headers = Sequence[tuple[str, str]]


def answer(side: Side, target: str, headers: Headers, host: str = "app.test") -> dict:
    """One GET with ``headers`` (Host ``host``); the status, the Location and the JSON body."""
    with side.connect() as connection:
        connection.send(request("GET", target, [*headers, ("Connection", "close")], host=host))
        response = connection.read_response()
    view = {"status": response.status, "location": response.header("location")}
    if response.header("content-type") == "application/json":
        view["json"] = mask_own_ports(side, json.loads(response.body))
    else:
        view["body"] = response.body.decode("latin-1")
    return view


def mask_own_ports(side: Side, seen: dict) -> dict:
    """The test's ephemeral port (a client of 127.0.0.1) and the side's listening port (Flask's
    SERVER_PORT, Django's get_port()) differ between the servers: they compare as ``PORT``. A port a proxy
    reported stays."""
    client = seen.get("client")
    if client and client[0] == "127.0.0.1" and client[1] != 0:
        seen["client"] = [client[0], "PORT"]
    server = seen.get("server")
    if server and server[1] == str(side.server.port):
        seen["server"] = [server[0], "PORT"]
    if seen.get("port") == str(side.server.port):
        seen["port"] = "PORT"
    return seen


def asking(target: str, headers: Headers, host: str = "app.test"):
    return lambda side: answer(side, target, headers, host)


# ---------------------------------------------------------------------------
# ASGI: Starlette under rush and uvicorn, the loopback peer trusted (both servers' default).


def starlette_trusting(factory: ServerFactory, allowed: str) -> Pair:
    """The Starlette app under rush and uvicorn, both trusting ``allowed`` with the same flags."""
    trusted = ["--proxy-headers", "--forwarded-allow-ips", allowed]
    return start_pair(factory, "front_app:app", "asgi", rush_args=trusted, reference_args=trusted)


@pytest.fixture(scope="module")
def starlette(module_servers: ServerFactory) -> Pair:
    return starlette_trusting(module_servers, "127.0.0.1")


@pytest.fixture(scope="module")
def starlette_network(module_servers: ServerFactory) -> Pair:
    """A CIDR that holds the peer and the proxies of a chain (10.0.0.0/8)."""
    return starlette_trusting(module_servers, "127.0.0.0/8,10.0.0.0/8")


@pytest.fixture(scope="module")
def starlette_untrusted(module_servers: ServerFactory) -> Pair:
    """The peer (127.0.0.1) not in the list: its headers count for nothing."""
    return starlette_trusting(module_servers, "10.1.2.3")


@pytest.fixture(scope="module")
def starlette_everyone(module_servers: ServerFactory) -> Pair:
    return starlette_trusting(module_servers, "*")


FOR_SHAPES = {
    "one": [("X-Forwarded-For", "203.0.113.7")],
    "chain": [("X-Forwarded-For", "198.51.100.1, 203.0.113.7")],
    "spaces": [("X-Forwarded-For", "   203.0.113.7   ")],
    "no-spaces": [("X-Forwarded-For", "198.51.100.1,203.0.113.7")],
    "ipv6": [("X-Forwarded-For", "2001:db8::7")],
    "ipv6-brackets": [("X-Forwarded-For", "[2001:db8::7]")],
    "ipv6-port": [("X-Forwarded-For", "[2001:db8::7]:4711")],
    "ipv4-port": [("X-Forwarded-For", "203.0.113.7:4711")],
    "unknown": [("X-Forwarded-For", "unknown")],
    "garbage": [("X-Forwarded-For", "not an address")],
    "trusted-right-most": [("X-Forwarded-For", "203.0.113.7, 127.0.0.1")],
    "trusted-with-port": [("X-Forwarded-For", "203.0.113.7, 127.0.0.1:4711")],
    "all-trusted": [("X-Forwarded-For", "127.0.0.2, 127.0.0.1")],
    "two-lines": [("X-Forwarded-For", "198.51.100.1"), ("X-Forwarded-For", "203.0.113.7")],
    "mapped-v4": [("X-Forwarded-For", "::ffff:203.0.113.7")],
    "empty": [("X-Forwarded-For", "")],
    "trailing-comma": [("X-Forwarded-For", "203.0.113.7,")],
    # Four lines a client sent, then its proxy's (HAProxy's `option forwardfor` adds a line).
    "five-lines": [("X-Forwarded-For", f"198.51.100.{n}") for n in range(1, 6)],
    "v6-zone": [("X-Forwarded-For", "fe80::1%eth0")],
    "port-only-colon": [("X-Forwarded-For", "203.0.113.7:")],
}

PROTO_SHAPES = {
    "https": [("X-Forwarded-Proto", "https")],
    "http": [("X-Forwarded-Proto", "http")],
    "HTTPS": [("X-Forwarded-Proto", "HTTPS")],
    "https-http": [("X-Forwarded-Proto", "https,http")],
    "wss": [("X-Forwarded-Proto", "wss")],
    "garbage": [("X-Forwarded-Proto", "gopher")],
    "with-for": [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")],
}


@pytest.mark.parametrize("shape", FOR_SHAPES)
def test_client_address(starlette: Pair, shape: str) -> None:
    """`request.client` from the X-Forwarded-For shapes nginx and balancers send."""
    starlette.check(f"for-{shape}", asking("/where", FOR_SHAPES[shape]))


@pytest.mark.parametrize("shape", PROTO_SHAPES)
def test_scheme_and_urls(starlette: Pair, shape: str) -> None:
    """`request.url`, `url_for` and the trailing-slash redirect follow X-Forwarded-Proto."""
    starlette.check(f"proto-{shape}", asking("/where", PROTO_SHAPES[shape]))
    starlette.check(f"proto-redirect-{shape}", asking("/folder/", PROTO_SHAPES[shape]))


NETWORK_SHAPES = {
    "chain": [("X-Forwarded-For", "203.0.113.7, 10.0.0.5"), ("X-Forwarded-Proto", "https")],
    "trusted-right-most": [
        ("X-Forwarded-For", "198.51.100.1, 203.0.113.7, 10.9.9.9, 127.0.0.1"),
        ("X-Forwarded-Proto", "https"),
    ],
    "all-trusted": [("X-Forwarded-For", "10.0.0.9, 10.0.0.5"), ("X-Forwarded-Proto", "https")],
    # A CDN (10.0.0.5, trusted) reached over https appends "https"; the proxy in front of the
    # app, reached by the CDN over http, appends "http".
    "chain-protos": [("X-Forwarded-For", "203.0.113.7, 10.0.0.5"), ("X-Forwarded-Proto", "https, http")],
}


@pytest.mark.parametrize("shape", NETWORK_SHAPES)
def test_client_behind_trusted_network(starlette_network: Pair, shape: str) -> None:
    starlette_network.check(f"network-{shape}", asking("/where", NETWORK_SHAPES[shape]))


def test_untrusted_peer(starlette_untrusted: Pair) -> None:
    headers = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")]
    starlette_untrusted.check("untrusted", asking("/where", headers))


@pytest.mark.parametrize("shape", ["chain", "trusted-right-most", "ipv4-port"])
def test_everyone_trusted(starlette_everyone: Pair, shape: str) -> None:
    starlette_everyone.check(f"everyone-{shape}", asking("/where", FOR_SHAPES[shape]))


@pytest.mark.parametrize("proto", ["https", "wss", "http"])
def test_websocket_scheme(starlette: Pair, proto: str) -> None:
    """A WebSocket behind a TLS-terminating proxy: `websocket.url` is wss://."""

    def script(side: Side) -> dict:
        headers = {"X-Forwarded-Proto": proto, "X-Forwarded-For": "203.0.113.7"}
        with connect(f"ws://127.0.0.1:{side.server.port}/ws", additional_headers=headers) as websocket:
            return mask_own_ports(side, json.loads(websocket.recv(timeout=15)))

    starlette.check(f"ws-{proto}", script)


# ---------------------------------------------------------------------------
# WSGI: Flask under rush --forwarded-host and under gunicorn with ProxyFix for one proxy.


@pytest.fixture(scope="module")
def flask(module_servers: ServerFactory) -> Pair:
    return start_pair(
        module_servers,
        "front_app:wsgi",
        "wsgi",
        rush_args=["--forwarded-allow-ips", "127.0.0.1", "--forwarded-host"],
        reference_args=["--forwarded-allow-ips", "127.0.0.1"],
    )


NGINX = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")]
WSGI_SHAPES = {
    "none": [],
    "nginx": NGINX,
    "nginx-host": [*NGINX, ("X-Forwarded-Host", "www.example.org")],
    "host-with-port": [*NGINX, ("X-Forwarded-Host", "www.example.org:8443")],
    "port": [*NGINX, ("X-Forwarded-Host", "www.example.org"), ("X-Forwarded-Port", "8443")],
    "http-port": [("X-Forwarded-Proto", "http"), ("X-Forwarded-Port", "8080")],
    "ipv6-client": [("X-Forwarded-For", "2001:db8::7"), ("X-Forwarded-Proto", "https")],
    "proto-garbage": [("X-Forwarded-Proto", "gopher")],
    "proto-upper": [("X-Forwarded-Proto", "HTTPS")],
}


@pytest.mark.parametrize("shape", WSGI_SHAPES)
def test_flask_behind_a_proxy(flask: Pair, shape: str) -> None:
    """`request.url`, `url_for(_external=True)`, `is_secure`, `remote_addr` and a redirect."""
    flask.check(f"flask-{shape}", asking("/where", WSGI_SHAPES[shape]))
    flask.check(f"flask-redirect-{shape}", asking("/go", WSGI_SHAPES[shape]))


@pytest.fixture(scope="module")
def flask_plain(module_servers: ServerFactory) -> Pair:
    """gunicorn alone (no ProxyFix: the app sees gunicorn's own reading, its
    secure_scheme_headers), rush without --forwarded-host."""
    return start_pair(module_servers, "front_app:flask_app", "wsgi")


@pytest.mark.parametrize(
    "headers",
    [
        [("X-Forwarded-Proto", "https")],
        [("X-Forwarded-Ssl", "on")],
        [("X-Forwarded-Protocol", "ssl")],
    ],
    ids=["proto", "ssl", "protocol"],
)
def test_gunicorn_secure_scheme_headers(flask_plain: Pair, headers: Headers) -> None:
    def script(side: Side) -> dict:
        return {"is_secure": answer(side, "/where", headers)["json"]["is_secure"]}

    flask_plain.check(f"secure-{headers[0][0]}", script)


# ---------------------------------------------------------------------------
# TLS: rush and the reference terminate TLS themselves, and a trusted peer still sends headers
# (a TCP balancer in front that adds them, or a proxy re-encrypting to the app).


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def starlette_tls(module_servers: ServerFactory, pki: dict[str, Path]) -> Pair:
    options = ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"]), "--proxy-headers"]
    return start_pair(module_servers, "front_app:app", "asgi", rush_args=options, reference_args=options)


@pytest.fixture(scope="module")
def flask_tls(module_servers: ServerFactory, pki: dict[str, Path]) -> Pair:
    return start_pair(
        module_servers,
        "front_app:flask_app",
        "wsgi",
        rush_args=["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])],
        reference_args=["--certfile", str(pki["chain"]), "--keyfile", str(pki["key"])],
    )


def tls_answer(side: Side, pki: dict[str, Path], target: str, headers: Headers) -> dict:
    """`answer` over TLS (Python's ssl), Connection: close."""
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    with socket.create_connection(("127.0.0.1", side.server.port), timeout=GUARD_TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as sock:
            sock.sendall(request("GET", target, [*headers, ("Connection", "close")], host="app.test"))
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    location = next(
        (
            line.split(b":", 1)[1].strip().decode()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"location:")
        ),
        None,
    )
    view: dict = {"status": status, "location": location}
    if body.startswith(b"{"):
        view["json"] = mask_own_ports(side, json.loads(body))
    return view


TLS_SHAPES = {
    "none": [],
    "proto-http": [("X-Forwarded-Proto", "http")],
    "proto-https": [("X-Forwarded-Proto", "https")],
    "proto-garbage": [("X-Forwarded-Proto", "gopher")],
    "for": [("X-Forwarded-For", "203.0.113.7")],
}


@pytest.mark.parametrize("shape", TLS_SHAPES)
def test_asgi_over_tls(starlette_tls: Pair, pki: dict[str, Path], shape: str) -> None:
    starlette_tls.check(f"tls-{shape}", lambda side: tls_answer(side, pki, "/where", TLS_SHAPES[shape]))
    starlette_tls.check(f"tls-redirect-{shape}", lambda side: tls_answer(side, pki, "/folder/", TLS_SHAPES[shape]))


@pytest.mark.parametrize("shape", TLS_SHAPES)
def test_wsgi_over_tls(flask_tls: Pair, pki: dict[str, Path], shape: str) -> None:
    flask_tls.check(f"tls-{shape}", lambda side: tls_answer(side, pki, "/where", TLS_SHAPES[shape]))


# ---------------------------------------------------------------------------
# HTTP/2 (h2c, prior knowledge): rush must read the same headers the same way as over HTTP/1.1,
# so rush over h2c is compared with uvicorn over HTTP/1.1 (uvicorn has no HTTP/2).

H2C_SHAPES = {
    "nginx": [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")],
    "chain-port": [("X-Forwarded-For", "198.51.100.1, [2001:db8::7]:4711"), ("X-Forwarded-Proto", "https")],
}


@pytest.mark.parametrize("shape", H2C_SHAPES)
def test_asgi_over_h2c(starlette: Pair, shape: str) -> None:
    def fetch(side: Side, target: str) -> dict:
        http2 = side is starlette.rush
        with httpx.Client(http1=not http2, http2=http2, base_url=side.url) as client:
            response = client.get(target, headers=[*H2C_SHAPES[shape], ("Host", "app.test")])
        assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
        view = {"status": response.status_code, "location": response.headers.get("location")}
        if response.headers.get("content-type") == "application/json":
            view["json"] = mask_own_ports(side, response.json())
        return view

    starlette.check(f"h2c-{shape}", lambda side: fetch(side, "/where"))
    starlette.check(f"h2c-redirect-{shape}", lambda side: fetch(side, "/folder/"))


# ---------------------------------------------------------------------------
# FastAPI mounted under a prefix a proxy strips (--root-path), behind TLS termination.


@pytest.fixture(scope="module")
def fastapi(module_servers: ServerFactory) -> Pair:
    options = ["--root-path", "/api", "--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]
    return start_pair(module_servers, "fastapi_app", "asgi", rush_args=options, reference_args=options)


@pytest.mark.parametrize("target", ["/items/5/", "/docs", "/openapi.json", "/items/5?q=x"])
def test_fastapi_under_a_root_path(fastapi: Pair, target: str) -> None:
    """FastAPI's redirect_slashes Location, its /docs page (which names the openapi URL) and the
    openapi document's `servers`, under `--root-path /api` with X-Forwarded-Proto https."""

    def script(side: Side) -> dict:
        headers = [("X-Forwarded-Proto", "https"), ("X-Forwarded-For", "203.0.113.7")]
        with side.connect() as connection:
            connection.send(request("GET", target, [*headers, ("Connection", "close")], host="app.test"))
            response = connection.read_response()
        return {"status": response.status, "location": response.header("location"), "body": response.text}

    fastapi.check(f"root-{target}", script)


# ---------------------------------------------------------------------------
# A Unix-socket peer (nginx `proxy_pass http://unix:/run/app.sock`).


@pytest.fixture(scope="module")
def starlette_uds(module_servers: ServerFactory) -> Pair:
    """rush and uvicorn each on a Unix socket of their own (``--uds``)."""
    sides = []
    for name in ("rush", "uvicorn"):
        record = module_servers.directory / f"front-uds-{name}.jsonl"
        entry = "tests.differential.recorder:asgi"
        if name == "rush":
            command = [str(RUSH), entry, "--workers", "1", "--interface", "asgi", "--proxy-headers"]
        else:
            command = [str(VENV_BIN / "uvicorn"), entry, "--http", "httptools", "--proxy-headers"]
        server = (RushServer if name == "rush" else ReferenceServer)(
            app="",
            args=[],
            command=command,
            directory=module_servers.directory,
            name=f"front-uds-{name}",
            bind="uds",
            env=clean_environment({"DIFF_TARGET": "tests.differential.apps.front_app:app", "DIFF_RECORD": str(record)}),
        )
        module_servers.servers.append(server)
        server.start()
        sides.append(Side(name, server, record))
    return Pair("front_app-uds", sides[0], sides[1])


def test_unix_socket_peer(starlette_uds: Pair) -> None:
    headers = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")]
    starlette_uds.check("uds", asking("/where", headers))


# ---------------------------------------------------------------------------
# The forwarded host (--forwarded-host): ASGI against hypercorn's ProxyFixMiddleware for one
# proxy, WSGI against werkzeug's ProxyFix (the `flask` pair above), with the shapes a proxy and a
# client posing as one send.


@pytest.fixture(scope="module")
def starlette_host(module_servers: ServerFactory) -> Pair:
    return start_pair(
        module_servers,
        "front_app:proxied",
        "asgi",
        rush_args=["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1", "--forwarded-host"],
        reference="hypercorn",
    )


HOST_SHAPES = {
    "host": [("X-Forwarded-Host", "www.example.org")],
    "host-port": [("X-Forwarded-Host", "www.example.org:8443")],
    "host-ipv6": [("X-Forwarded-Host", "[2001:db8::7]:8443")],
    "two-hosts": [("X-Forwarded-Host", "client.test, www.example.org")],
    "host-percent": [("X-Forwarded-Host", "www%2Eexample.org")],
    # Not a Host value (RFC 9110 7.2: uri-host [":" port]).
    "bad-space": [("X-Forwarded-Host", "www.example.org evil.test")],
    "bad-slash": [("X-Forwarded-Host", "evil.test/path?")],
    "bad-at": [("X-Forwarded-Host", "user@evil.test")],
    "bad-empty": [("X-Forwarded-Host", "")],
    "bad-port": [("X-Forwarded-Host", "evil.test:abc")],
    "bad-two-ports": [("X-Forwarded-Host", "evil.test:80:81")],
    "bad-bracket": [("X-Forwarded-Host", "[2001:db8::7")],
}


@pytest.mark.parametrize("shape", HOST_SHAPES)
def test_asgi_forwarded_host(starlette_host: Pair, shape: str) -> None:
    headers = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https"), *HOST_SHAPES[shape]]
    starlette_host.check(f"host-{shape}", asking("/where", headers))
    starlette_host.check(f"host-redirect-{shape}", asking("/folder/", headers))


PORT_SHAPES = {
    "bad-port-name": [("X-Forwarded-Port", "https")],
    "bad-port-big": [("X-Forwarded-Port", "65536")],
    "port-two": [("X-Forwarded-Port", "8443, 9443")],
    "port-default": [("X-Forwarded-Proto", "https"), ("X-Forwarded-Port", "443")],
}


@pytest.mark.parametrize("shape", [*HOST_SHAPES, *PORT_SHAPES])
def test_wsgi_forwarded_host(flask: Pair, shape: str) -> None:
    headers = [("X-Forwarded-For", "203.0.113.7"), *(HOST_SHAPES | PORT_SHAPES)[shape]]
    flask.check(f"flask-host-{shape}", asking("/where", headers))


# ---------------------------------------------------------------------------
# RFC 7239 `Forwarded` (--proxy-headers forwarded) against hypercorn's ProxyFixMiddleware in its
# "modern" mode, one proxy.


@pytest.fixture(scope="module")
def starlette_rfc7239(module_servers: ServerFactory) -> Pair:
    return start_pair(
        module_servers,
        "front_app:proxied_rfc7239",
        "asgi",
        rush_args=["--proxy-headers", "forwarded", "--forwarded-allow-ips", "127.0.0.1", "--forwarded-host"],
        reference="hypercorn",
    )


FORWARDED_SHAPES = {
    "nginx": "for=203.0.113.7;proto=https;host=www.example.org",
    "proto-only": "proto=https",
    "upper-keys": "For=203.0.113.7;Proto=https",
    "quoted-v6": 'for="[2001:db8::7]:4711";proto=https',
    "quoted-v4-port": 'for="203.0.113.7:4711"',
    "unknown": "for=unknown;proto=https",
    "obfuscated": "for=_hidden;proto=https",
    "two-hops": "for=198.51.100.1;proto=http, for=203.0.113.7;proto=https",
    "spaces": "for=203.0.113.7; proto=https",
    "host-port": "for=203.0.113.7;host=www.example.org:8443;proto=https",
    "host-port-quoted": 'for=203.0.113.7;host="www.example.org:8443";proto=https',
}


@pytest.mark.parametrize("shape", FORWARDED_SHAPES)
def test_rfc7239_forwarded(starlette_rfc7239: Pair, shape: str) -> None:
    starlette_rfc7239.check(f"rfc7239-{shape}", asking("/where", [("Forwarded", FORWARDED_SHAPES[shape])]))


def test_rfc7239_after_a_clients_broken_line(starlette_rfc7239: Pair) -> None:
    """A client's malformed Forwarded line, then the one its proxy adds (HAProxy's `option
    forwarded` adds a line): the proxy's line still names the client."""
    headers = [("Forwarded", "for=not an address"), ("Forwarded", "for=203.0.113.7;proto=https")]
    starlette_rfc7239.check("rfc7239-broken-then-proxy", asking("/where", headers))


# ---------------------------------------------------------------------------
# Django as its deployment docs set it up behind a proxy (apps/front_django.py).

DJANGO_SHAPES = {
    "none": [],
    "nginx": [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")],
    "port": [("X-Forwarded-Proto", "https"), ("X-Forwarded-Port", "8443")],
    "proto-http": [("X-Forwarded-Proto", "http")],
}


@pytest.fixture(scope="module")
def django_wsgi(module_servers: ServerFactory) -> Pair:
    return start_pair(module_servers, "front_django:wsgi", "wsgi")


@pytest.fixture(scope="module")
def django_asgi(module_servers: ServerFactory) -> Pair:
    trusted = ["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]
    return start_pair(module_servers, "front_django:asgi", "asgi", rush_args=trusted, reference_args=trusted)


@pytest.mark.parametrize("shape", DJANGO_SHAPES)
@pytest.mark.parametrize("interface", ["wsgi", "asgi"])
def test_django_behind_a_proxy(django_wsgi: Pair, django_asgi: Pair, interface: str, shape: str) -> None:
    pair = django_wsgi if interface == "wsgi" else django_asgi
    pair.check(f"django-{shape}", asking("/where/", DJANGO_SHAPES[shape]))
    pair.check(f"django-redirect-{shape}", asking("/go/", DJANGO_SHAPES[shape]))


# ---------------------------------------------------------------------------
# A prefix the proxy strips (--root-path) together with its headers.


@pytest.fixture(scope="module")
def starlette_root(module_servers: ServerFactory) -> Pair:
    options = ["--root-path", "/api", "--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]
    return start_pair(module_servers, "front_app:app", "asgi", rush_args=options, reference_args=options)


@pytest.mark.parametrize("target", ["/where", "/folder/"])
def test_starlette_under_a_root_path(starlette_root: Pair, target: str) -> None:
    starlette_root.check(f"root-{target}", asking(target, NGINX))


def test_websocket_under_a_root_path(starlette_root: Pair) -> None:
    def script(side: Side) -> dict:
        headers = dict(NGINX)
        with connect(f"ws://127.0.0.1:{side.server.port}/ws", additional_headers=headers) as websocket:
            return mask_own_ports(side, json.loads(websocket.recv(timeout=15)))

    starlette_root.check("root-ws", script)


@pytest.fixture(scope="module")
def flask_root(module_servers: ServerFactory) -> Pair:
    """gunicorn takes the prefix from SCRIPT_NAME (and wants it in the path), rush from --root-path."""
    return start_pair(
        module_servers,
        "front_app:wsgi",
        "wsgi",
        rush_args=["--root-path", "/api", "--forwarded-allow-ips", "127.0.0.1", "--forwarded-host"],
        reference_args=["--forwarded-allow-ips", "127.0.0.1"],
        env={"SCRIPT_NAME": "/api"},
    )


@pytest.mark.parametrize("target", ["/api/where", "/api/go"])
def test_flask_under_a_root_path(flask_root: Pair, target: str) -> None:
    headers = [*NGINX, ("X-Forwarded-Host", "www.example.org")]
    flask_root.check(f"root-{target}", asking(target, headers))


@pytest.mark.parametrize("shape", [shape for shape in HOST_SHAPES if shape.startswith("bad-") and shape != "bad-empty"])
def test_a_forwarded_host_is_checked_as_a_host_is(starlette_host: Pair, shape: str) -> None:
    """rush refuses a request whose own Host is such a value (400); from X-Forwarded-Host it must
    not reach the app either: the app sees the request's own Host."""
    value = HOST_SHAPES[shape][0][1]
    rush = starlette_host.rush
    assert answer(rush, "/where", [], host=value)["status"] == 400
    seen = answer(rush, "/where", [("X-Forwarded-Host", value)])
    assert seen["status"] == 200
    assert seen["json"]["host"] == "app.test"
