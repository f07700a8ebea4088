"""systemd socket activation, driven by systemd's own ``systemd-socket-activate``:
it listens on the sockets, and on the first connection execs rush with
``LISTEN_FDS``, ``LISTEN_PID`` and ``LISTEN_FDNAMES`` set, exactly as a
``.socket`` unit does (docs/systemd/). rush must serve every passed socket
from every worker, over HTTP, TLS and as ``rush proxy``, and keep serving
them through a SIGHUP reload under load without failing a request.
"""

from __future__ import annotations

import shutil
import signal
import socket
import ssl
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import pytest
import trustme
from support import GUARD_TIMEOUT, RUSH, RushServer, ServerFactory, wait_for
from test_drain import parse_wrk

ACTIVATE = shutil.which("systemd-socket-activate")
WRK = shutil.which("wrk")
WRK_SECONDS = 6

pytestmark = pytest.mark.skipif(
    ACTIVATE is None, reason="systemd-socket-activate is not installed (make test installs Debian's systemd)"
)


def free_ports(count: int) -> list[int]:
    """Ports that were free a moment ago, all different (the probes stay open while choosing)."""
    probes = [socket.create_server(("127.0.0.1", 0)) for _ in range(count)]
    ports = [probe.getsockname()[1] for probe in probes]
    for probe in probes:
        probe.close()
    return ports


def accepts_connections(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


Activated = Callable[..., RushServer]


@pytest.fixture
def activated(rush_server: ServerFactory) -> Activated:
    """Starts ``systemd-socket-activate`` listening on ``ports`` (named
    ``names``), which execs rush (``rush APP ARGS`` or ``rush proxy ARGS``)
    once the first connection arrives; returns when the sockets listen."""

    def start(app: str, *args: str, ports: Sequence[int], names: Sequence[str] = (), proxy: bool = False) -> RushServer:
        command = [str(ACTIVATE)]
        for port in ports:
            command += ["--listen", f"127.0.0.1:{port}"]
        if names:
            command.append("--fdname=" + ":".join(names))
        # It passes on only the variables it is told to (and PATH, HOME...).
        command += ["-E", "PYTHONUNBUFFERED=1", "-E", "PYTHONDONTWRITEBYTECODE=1", str(RUSH)]
        if proxy:
            command.append("proxy")
        server = rush_server(app, *args, command=command, bind="none", wait=False)
        server.port = ports[0]
        wait_for(lambda: accepts_connections(ports[0]), "systemd-socket-activate to listen")
        return server

    return start


def pid_over(base_url: str, **client: object) -> int:
    with httpx.Client(base_url=base_url, timeout=GUARD_TIMEOUT, **client) as http:  # type: ignore[arg-type]
        response = http.get("/pid", headers={"Connection": "close"})
    assert response.status_code == 200, response.text
    return int(response.text)


def every_worker_answers(base_url: str, workers: set[int], **client: object) -> None:
    seen: set[int] = set()

    def all_seen() -> bool:
        seen.add(pid_over(base_url, **client))
        return seen == workers

    wait_for(all_seen, f"every worker {workers} to answer on {base_url} (seen {seen})")


def test_every_worker_serves_every_socket_systemd_passed(activated: Activated) -> None:
    first, second = free_ports(2)
    server = activated("basic", "--workers", "2", ports=[first, second], names=["web", "admin"])
    # The connection that woke systemd-socket-activate is served once rush runs.
    assert pid_over(f"http://127.0.0.1:{first}") > 0
    workers = server.wait_for_workers(2)
    server.wait_for_log(
        rf"serving on http://127\.0\.0\.1:{first} \(systemd socket web\), "
        rf"http://127\.0\.0\.1:{second} \(systemd socket admin\) with 2 worker"
    )
    for port in (first, second):
        every_worker_answers(f"http://127.0.0.1:{port}", workers)
    assert server.stop() == 0


def test_the_app_does_not_see_the_activation_variables(activated: Activated) -> None:
    """They were for rush alone: a process the app starts must not take the sockets for its own."""
    (port,) = free_ports(1)
    activated("environment", ports=[port], names=["web"])
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=GUARD_TIMEOUT) as http:
        names = set(http.get("/").json())
    assert "PYTHONUNBUFFERED" in names  # passed with -E: the app sees the environment systemd gave
    assert not {"LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"} & names


@pytest.mark.skipif(WRK is None, reason="wrk is not installed (make test installs it with apt)")
def test_a_sighup_reload_under_load_on_activated_sockets_fails_no_request(activated: Activated) -> None:
    first, second = free_ports(2)
    server = activated("basic", "--workers", "2", ports=[first, second])
    assert pid_over(f"http://127.0.0.1:{first}") > 0
    old = server.wait_for_workers(2)
    loads = [
        subprocess.Popen(
            [str(WRK), "-t1", "-c20", f"-d{WRK_SECONDS}s", f"http://127.0.0.1:{port}/"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for port in (first, second)
    ]
    try:
        # Each worker counts the requests its handler saw; a new connection
        # each time, as the workers share the sockets and either may answer.
        with httpx.Client(base_url=f"http://127.0.0.1:{first}", timeout=GUARD_TIMEOUT) as client:
            wait_for(
                lambda: client.get("/count", headers={"Connection": "close"}).json()["calls"] > 100,
                "wrk's load to reach the server",
            )
        server.send_signal(signal.SIGHUP)
        new = wait_for(
            lambda: (pids := server.worker_pids()) and len(pids) == 2 and not pids & old and pids,
            "the reload to replace both workers",
        )
        outputs = [load.communicate(timeout=WRK_SECONDS + GUARD_TIMEOUT)[0] for load in loads]
    finally:
        for load in loads:
            if load.poll() is None:
                load.kill()
                load.wait()
    for output in outputs:
        requests, socket_errors, non_2xx = parse_wrk(output)
        assert requests > 500, output
        assert socket_errors == 0, output
        assert non_2xx == 0, output
    # The new workers serve both sockets, which the supervisor kept across the reload.
    for port in (first, second):
        every_worker_answers(f"http://127.0.0.1:{port}", new)


def test_tls_on_activated_sockets(activated: Activated, tmp_path: Path) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(key)
    context = ssl.create_default_context()
    ca.configure_trust(context)
    first, second = free_ports(2)
    server = activated(
        "basic", "--workers", "2", "--ssl-certfile", str(chain), "--ssl-keyfile", str(key), ports=[first, second]
    )
    assert pid_over(f"https://127.0.0.1:{first}", verify=context) > 0
    workers = server.wait_for_workers(2)
    server.wait_for_log(rf"serving on https://127\.0\.0\.1:{first}, https://127\.0\.0\.1:{second} with")
    for port in (first, second):
        every_worker_answers(f"https://127.0.0.1:{port}", workers, verify=context)
    server.send_signal(signal.SIGHUP)
    new = wait_for(
        lambda: (pids := server.worker_pids()) and len(pids) == 2 and not pids & workers and pids,
        "the reload to replace both workers",
    )
    every_worker_answers(f"https://127.0.0.1:{second}", new, verify=context)


def test_rush_proxy_on_activated_sockets(activated: Activated, rush_server: ServerFactory) -> None:
    origin = rush_server("basic")
    first, second = free_ports(2)
    server = activated("", "--allow-private", ports=[first, second], proxy=True)
    for port in (first, second):
        with httpx.Client(proxy=f"http://127.0.0.1:{port}", timeout=GUARD_TIMEOUT) as client:
            response = client.get(f"http://127.0.0.1:{origin.port}/pid")
        assert response.status_code == 200
        assert int(response.text) in origin.worker_pids()
    server.wait_for_log(r"serving on http://127\.0\.0\.1:\d+, http://127\.0\.0\.1:\d+ with 1 worker")
