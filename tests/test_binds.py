"""Several ``--bind`` addresses at once, as gunicorn takes them: TCP
(IPv4 and ``[IPv6]:PORT``), ``unix:PATH`` and ``fd://N`` together, every
worker accepting on every one of them; ``--bind`` with ``--host``/``--port``
refused with one line; ``rush proxy`` on two binds; an address already in
use named in the error, as uvicorn and gunicorn name it.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
from support import (
    GUARD_TIMEOUT,
    REPO,
    RUSH,
    Connection,
    ServerFactory,
    clean_environment,
    free_port,
    request,
    run_rush,
    run_to_exit,
    wait_for,
)


def free_port6() -> int:
    with socket.socket(socket.AF_INET6) as probe:
        probe.bind(("::1", 0))
        return probe.getsockname()[1]


def pid_over(address: object, family: int) -> int:
    """Which worker answers a fresh connection to ``address``."""
    with Connection(address, family, GUARD_TIMEOUT) as connection:
        connection.send(request("GET", "/pid", [("Connection", "close")]))
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200], result
    return int(result.responses[0].body)


def every_worker_answers(address: object, family: int, workers: set[int]) -> None:
    """New connections to ``address`` until every one of ``workers`` has answered one."""
    seen: set[int] = set()

    def all_seen() -> bool:
        seen.add(pid_over(address, family))
        return seen == workers

    wait_for(all_seen, f"every worker {workers} to answer on {address} (seen {seen})")


def listening(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_every_worker_serves_every_bind(rush_server: ServerFactory, tmp_path: Path) -> None:
    port4, port6, path = free_port(), free_port6(), tmp_path / "rush.sock"
    server = rush_server(
        "basic",
        *("-b", f"127.0.0.1:{port4}", "--bind", f"[::1]:{port6}", "-b", f"unix:{path}", "-b", "fd://{fd}"),
        *("--workers", "2"),
    )
    workers = server.wait_for_workers(2)
    server.wait_for_log(
        rf"serving on http://127\.0\.0\.1:{port4}, http://\[::1\]:{port6}, unix:{path}, "
        rf"http://127\.0\.0\.1:{server.port} with 2 worker"
    )
    addresses = {
        "tcp": (("127.0.0.1", port4), socket.AF_INET),
        "ipv6": (("::1", port6), socket.AF_INET6),
        "unix": (str(path), socket.AF_UNIX),
        "fd": (("127.0.0.1", server.port), socket.AF_INET),
    }
    for address, family in addresses.values():
        every_worker_answers(address, family, workers)
    assert server.worker_pids() == workers
    assert server.stop() == 0
    assert not path.exists()  # the Unix socket rush bound is removed at exit


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (["--port", "{port}"], {}, "--port"),
        (["--host", "127.0.0.1", "--port", "{port}"], {}, "--host, --port"),
        ([], {"RUSH_PORT": "{port}"}, "--port"),
        (["--uds", "/tmp/never.sock"], {}, "--uds"),
    ],
)
def test_bind_with_host_or_port_is_one_clear_error(flags: list[str], env: dict[str, str], named: str) -> None:
    port, other = free_port(), free_port()
    fill = {"{port}": str(other)}
    result = run_rush(
        "tests.apps.basic:app",
        "-b",
        f"127.0.0.1:{port}",
        *[fill.get(flag, flag) for flag in flags],
        env={name: fill.get(value, value) for name, value in env.items()},
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"rush: error: --bind cannot be combined with {named}: give every address with --bind "
        f"(got ['127.0.0.1:{port}'])"
    ]
    assert not listening(port) and not listening(other)


def test_an_address_in_use_is_named(tmp_path: Path) -> None:
    """With several binds, "Address already in use" alone does not say which one: uvicorn and
    gunicorn name the address, and so does rush."""
    free = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        commands = {
            "rush": [str(RUSH), "tests.apps.basic:app", "-b", f"127.0.0.1:{free}", "-b", f"127.0.0.1:{port}"],
            "uvicorn": [str(REPO / ".venv" / "bin" / "uvicorn"), "tests.apps.asgi_apps:app", "--port", str(port)],
        }
        results = {name: run_to_exit(command) for name, command in commands.items()}
    assert f"127.0.0.1', {port}" in results["uvicorn"].stderr, results["uvicorn"]
    assert results["rush"].returncode == 1
    assert results["rush"].stderr.splitlines() == [
        f"rush: cannot listen: [Errno 98] Address already in use (127.0.0.1:{port})"
    ]
    assert not listening(free)


def test_rush_bind_env_takes_several_addresses(rush_server: ServerFactory) -> None:
    first, second = free_port(), free_port()
    env = clean_environment({"RUSH_BIND": f"127.0.0.1:{first},127.0.0.1:{second}"})
    server = rush_server("basic", bind="none", env=env, wait=False)
    server.port = first
    server.wait_ready()
    worker = server.single_worker()
    assert pid_over(("127.0.0.1", second), socket.AF_INET) == worker


def test_tls_refuses_a_unix_bind(tmp_path: Path) -> None:
    result = run_rush(
        *("tests.apps.basic:app", "-b", "127.0.0.1:0", "-b", f"unix:{tmp_path}/s"),
        *("--ssl-certfile", "cert.pem", "--ssl-keyfile", "key.pem"),
    )
    assert result.returncode == 2
    assert result.stderr.startswith("rush: error: --ssl-certfile applies to TCP listeners, not Unix sockets")


def test_proxy_serves_every_bind(rush_server: ServerFactory) -> None:
    origin = rush_server("basic")
    first, second = free_port(), free_port()
    proxy = rush_server(
        "",
        *("--bind", f"127.0.0.1:{first}", "--bind", f"127.0.0.1:{second}", "--allow-private"),
        command=[str(RUSH), "proxy"],
        bind="none",
        wait=False,
    )
    proxy.wait_for_log(r"serving on")
    for port in (first, second):
        with Connection(("127.0.0.1", port), socket.AF_INET, GUARD_TIMEOUT) as connection:
            target = f"http://127.0.0.1:{origin.port}/pid"
            connection.send(request("GET", target, [("Connection", "close")], host=f"127.0.0.1:{origin.port}"))
            (response,) = connection.read_until_close().responses
        assert response.status == 200
        assert int(response.body) in origin.worker_pids()


def test_ttin_and_hup_keep_every_bind_served(rush_server: ServerFactory, tmp_path: Path) -> None:
    """A slot added by SIGTTIN gets its own socket for the TCP bind and the
    shared Unix one; a SIGHUP's new workers take over both."""
    port, path = free_port(), tmp_path / "rush.sock"
    server = rush_server("basic", "-b", f"127.0.0.1:{port}", "-b", f"unix:{path}", bind="none", wait=False)
    server.port = port
    server.wait_ready()
    first = server.single_worker()
    server.send_signal(signal.SIGTTIN)
    workers = server.wait_for_workers(2)
    assert first in workers
    addresses = [(("127.0.0.1", port), socket.AF_INET), (str(path), socket.AF_UNIX)]
    for address, family in addresses:
        every_worker_answers(address, family, workers)
    server.send_signal(signal.SIGHUP)
    new = wait_for(
        lambda: (pids := server.worker_pids()) and len(pids) == 2 and not pids & workers and pids,
        "the reload to replace both workers",
    )
    for address, family in addresses:
        every_worker_answers(address, family, new)


def served_json(address: object, family: int, target: str, host: str = "127.0.0.1") -> dict:
    """One GET over a fresh connection to ``address``; its JSON body."""
    with Connection(address, family, GUARD_TIMEOUT) as connection:
        connection.send(request("GET", target, [("Connection", "close")], host=host))
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200], result
    return result.responses[0].json()


def test_each_request_names_the_bind_it_came_through(rush_server: ServerFactory, tmp_path: Path) -> None:
    """gunicorn, uvicorn and hypercorn tell the app the address of the listener a connection came
    through (rush named the first TCP bind for every one): ASGI's `server`, `(path, None)` for a
    Unix socket as uvicorn gives it; WSGI's SERVER_NAME and SERVER_PORT, from the Host header over
    a Unix socket as gunicorn takes them."""
    first, second = free_port(), free_port()
    binds = ("-b", "fd://{fd}", "-b", f"127.0.0.1:{first}", "-b", f"127.0.0.1:{second}")
    asgi = rush_server("tests.apps.asgi_apps:app", *binds, "-b", f"unix:{tmp_path / 'a.sock'}")
    ports = (asgi.port, first, second)
    servers = [served_json(("127.0.0.1", port), socket.AF_INET, "/scope")["server"] for port in ports]
    assert servers == [["127.0.0.1", port] for port in ports]
    over_unix = served_json(str(tmp_path / "a.sock"), socket.AF_UNIX, "/scope")
    assert over_unix["server"] == [str(tmp_path / "a.sock"), None]
    asgi.stop()

    third, fourth = free_port(), free_port()
    binds = ("-b", "fd://{fd}", "-b", f"127.0.0.1:{third}", "-b", f"127.0.0.1:{fourth}")
    wsgi = rush_server("tests.apps.wsgi_apps:app", *binds, "-b", f"unix:{tmp_path / 'w.sock'}")
    for port in (wsgi.port, third, fourth):
        environ = served_json(("127.0.0.1", port), socket.AF_INET, "/environ")
        assert (environ["SERVER_NAME"], environ["SERVER_PORT"]) == ("127.0.0.1", str(port))
    environ = served_json(str(tmp_path / "w.sock"), socket.AF_UNIX, "/environ", host="example.com:8080")
    assert (environ["SERVER_NAME"], environ["SERVER_PORT"]) == ("example.com", "8080")
