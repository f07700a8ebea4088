"""Which server the app is told a request came to, against the servers that say it per listener:
gunicorn (WSGI, several ``-b``: SERVER_NAME and SERVER_PORT of the bind, and over a Unix socket
the Host header's name and port), hypercorn (ASGI, several ``--bind``: ``server`` of the bind) and
uvicorn (ASGI over ``--uds``: ``server`` is ``[path, None]``). Each side gets its own free ports
and socket paths, so a port the app reports is compared as "the one the client connected to"."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from harness import Side, start_pair
from support import GUARD_TIMEOUT, Connection, ServerFactory, free_port, request, wait_for

HOST = "example.test:8080"


def served(address: object, family: int, host: str = HOST) -> dict:
    """The app's JSON answer to one GET over a fresh connection to ``address``."""
    with Connection(address, family, GUARD_TIMEOUT) as connection:
        connection.send(request("GET", "/", [("Connection", "close")], host=host))
        (response,) = connection.read_until_close().responses
    assert response.status == 200, response
    return json.loads(response.body)


def as_seen_over(side: Side, port: int) -> dict:
    """What the app said over TCP ``port``, that port spelled BIND (the sides' ports differ)."""
    answer = json.dumps(served(("127.0.0.1", port), socket.AF_INET))
    return json.loads(answer.replace(f'"{port}"', '"BIND"').replace(f", {port}]", ', "BIND"]'))


def binds(flag: str, port: int, path: Path | None) -> list[str]:
    return [flag, f"127.0.0.1:{port}", *([flag, f"unix:{path}"] if path else [])]


def test_wsgi_names_the_bind_each_request_came_to(module_servers: ServerFactory, tmp_path: Path) -> None:
    """gunicorn listens only on its fd when given one, so both sides get their binds in the args."""
    ports = {"rush": (free_port(), free_port()), "gunicorn": (free_port(), free_port())}
    paths = {"rush": tmp_path / "rush.sock", "gunicorn": tmp_path / "gunicorn.sock"}
    args = {
        name: [*binds("-b", ports[name][0], paths[name]), *binds("-b", ports[name][1], None)]
        for name in ("rush", "gunicorn")
    }
    pair = start_pair(
        module_servers, "whoami:wsgi", "wsgi", rush_args=args["rush"], reference_args=args["gunicorn"], bind="none"
    )
    for side in (pair.rush, pair.reference):
        wait_for(lambda side=side: answers(ports[side.name][0]), f"{side.name} to listen")

    def script(side: Side) -> dict:
        first, second = ports[side.name]
        return {
            "first bind": as_seen_over(side, first),
            "second bind": as_seen_over(side, second),
            "unix socket": served(str(paths[side.name]), socket.AF_UNIX),
            "unix socket, no port in Host": served(str(paths[side.name]), socket.AF_UNIX, host="example.test"),
        }

    rush_view, _ = pair.check("binds", script)
    assert rush_view["second bind"] == {"name": "127.0.0.1", "port": "BIND"}, rush_view


def answers(port: int) -> bool:
    try:
        served(("127.0.0.1", port), socket.AF_INET)
    except OSError:
        return False
    return True


def test_asgi_names_the_bind_each_request_came_to(module_servers: ServerFactory) -> None:
    rush_port, hypercorn_port = free_port(), free_port()
    pair = start_pair(
        module_servers,
        "whoami",
        "asgi",
        rush_args=["-b", "fd://{fd}", *binds("-b", rush_port, None), "--lifespan", "off"],
        reference_args=binds("--bind", hypercorn_port, None),
        reference="hypercorn",
    )
    extra = {"rush": rush_port, "hypercorn": hypercorn_port}

    def script(side: Side) -> dict:
        return {
            "first bind": as_seen_over(side, side.server.port),
            "second bind": as_seen_over(side, extra[side.name]),
        }

    rush_view, _ = pair.check("binds", script)
    assert rush_view["second bind"] == {"server": ["127.0.0.1", "BIND"]}, rush_view


def test_asgi_over_a_unix_socket(module_servers: ServerFactory) -> None:
    """uvicorn gives ``(path, None)``, the ASGI spec's form for a Unix socket."""
    pair = start_pair(
        module_servers,
        "whoami",
        "asgi",
        rush_args=["--lifespan", "off"],
        reference_args=["--lifespan", "off"],
        bind="uds",
    )

    def script(side: Side) -> dict:
        path = str(side.server.address)
        answer = served(path, socket.AF_UNIX)
        return {"server": [answer["server"][0] == path, answer["server"][1]]}

    rush_view, _ = pair.check("uds", script)
    assert rush_view == {"server": [True, None]}, rush_view
