"""Faults around the loop: what one slow client, one hostile number or one
app that ignores a bound could once cost a whole worker.

Each test runs real rush processes over real sockets:

* ASGI ``send()`` waits while the client does not read, and a client that
  never reads is cut off by ``--send-timeout`` with the app told (its
  ``send()`` raises an ``OSError``), instead of the worker buffering the
  whole stream;
* WSGI bodies are streamed: each chunk is on the wire before the next is
  made, memory stays flat for any size, ``close()`` runs when the client
  leaves;
* a static file dated before 1970, a non-socket or negative listener fd:
  served or refused cleanly, never a panic;
* ``accept()`` failing with EMFILE does not strand the connections queued
  behind it.
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
from pathlib import Path

import httpx
import pytest
from support import GUARD_TIMEOUT, RUSH, RushServer, ServerFactory, request, wait_for

MIB = 1024 * 1024


def peak_rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")


def read_until(connection_socket: socket.socket, marker: bytes, limit: int = 1 << 20) -> bytes:
    data = b""
    while marker not in data:
        piece = connection_socket.recv(65536)
        assert piece, f"closed before {marker!r} arrived; got {data[-200:]!r}"
        data += piece
        assert len(data) < limit
    return data


# -- ASGI: backpressure and the send deadline --------------------------------


def test_asgi_send_waits_for_a_slow_client_and_the_send_timeout_stops_it(rush_server: ServerFactory) -> None:
    server = rush_server("tests.apps.pressure:asgi_app", "--interface", "asgi", "--send-timeout", "1")
    worker = server.single_worker()
    with server.connect(rcvbuf=4096) as connection:
        connection.send(request("GET", "/flood?id=stalled"))
        # The client reads nothing. The app must be held at send() and, once
        # no byte has moved for --send-timeout, see its send() raise.
        with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
            record = wait_for(
                lambda: client.get("/record", params={"id": "stalled"}).json(),
                "the flooding app was never stopped",
            )
    assert record["error"] == "ConnectionResetError"
    # What the app could hand over: the 1 MiB high-water mark, the kernel's
    # socket buffers and one message; never the unbounded stream.
    assert record["bytes"] < 16 * MIB, record
    assert peak_rss_kib(worker) < 120 * 1024


def test_an_asgi_app_whose_client_left_is_not_logged_as_failing(rush_server: ServerFactory) -> None:
    # send() raising ConnectionResetError once the client is gone is the
    # client's doing: an app that lets it out is not logged with a traceback
    # (hostile clients that reset would flood the log).
    server = rush_server("tests.apps.pressure:asgi_app", "--interface", "asgi", "--send-timeout", "1")
    with server.connect(rcvbuf=4096) as connection:
        connection.send(request("GET", "/flood-uncaught?id=left"))
        with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
            wait_for(lambda: client.get("/record", params={"id": "left"}).json(), "the app to end")
            assert client.get("/record", params={"id": "left"}).status_code == 200
    assert "whose client had left" not in server.stderr_text()
    assert "ConnectionResetError" not in server.stderr_text()


# -- WSGI: streamed bodies ---------------------------------------------------


@pytest.fixture(scope="module", params=["loop-thread", "threads-2"])
def wsgi_server(request: pytest.FixtureRequest, module_servers: ServerFactory) -> RushServer:
    """The streaming app on the loop thread, and on a pool of two threads
    (where a body whose client left used to hold its thread forever)."""
    threads = ("--threads", "2") if request.param == "threads-2" else ()
    return module_servers("tests.apps.pressure:wsgi_app", "--interface", "wsgi", *threads)


def test_wsgi_chunks_are_sent_as_the_app_makes_them(wsgi_server: RushServer, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    with wsgi_server.connect() as connection:
        connection.send(request("GET", f"/lines?gate={gate}"))
        # The generator is now waiting for the gate before its second line:
        # the first must already be here.
        head = read_until(connection.sock, b"one\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert b"Transfer-Encoding: chunked" in head
        assert b"two" not in head
        gate.touch()
        rest = read_until(connection.sock, b"0\r\n\r\n")
    assert b"two\n" in rest


def test_a_large_wsgi_body_streams_in_flat_memory(wsgi_server: RushServer) -> None:
    size = 200 * MIB
    worker = wsgi_server.single_worker()
    with wsgi_server.connect() as connection:
        connection.send(request("GET", f"/bytes?size={size}", [("Connection", "close")]))
        received = 0
        while piece := connection.sock.recv(1 << 20):
            received += len(piece)
    # The chunked framing adds a few bytes per 64 KiB chunk to the body.
    assert size < received < size + size // 100
    # Before streaming, the body was collected whole (427 MB for 200 MiB).
    assert peak_rss_kib(worker) < 100 * 1024


def test_a_wsgi_body_is_closed_when_its_client_leaves(wsgi_server: RushServer) -> None:
    # Four endless bodies one after the other: with two pool threads, a body
    # that kept its thread after its client left would leave none for the
    # third (and /closed itself needs a thread).
    for index in range(4):
        key = f"left-{index}"
        with wsgi_server.connect(rcvbuf=8192) as connection:
            connection.send(request("GET", f"/endless?id={key}"))
            read_until(connection.sock, b"eeee")
            # Unread data on close makes the kernel send a reset: the server's
            # next write fails, as it does for any client that went away.
        with httpx.Client(base_url=wsgi_server.url, timeout=GUARD_TIMEOUT) as client:
            wait_for(
                lambda key=key: client.get("/closed", params={"id": key}).json()["closes"] == 1,
                f"close() was not called after client {index} left",
            )
    wsgi_server.assert_running()


# -- values that used to panic ---------------------------------------------


def test_a_static_file_dated_before_1970_is_served(rush_server: ServerFactory, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    old = site / "old.txt"
    old.write_text("from the past")
    ten_years_before_1970 = -10 * 365 * 86400
    os.utime(old, (ten_years_before_1970, ten_years_before_1970))
    server = rush_server("", "--static", f"/s={site}")
    response = httpx.get(f"{server.url}/s/old.txt", timeout=GUARD_TIMEOUT)
    assert response.status_code == 200
    assert response.text == "from the past"
    assert response.headers["last-modified"] == "Thu, 01 Jan 1970 00:00:00 GMT"


def test_an_async_handler_sends_a_file_dated_before_1970(rush_server: ServerFactory, tmp_path: Path) -> None:
    old = tmp_path / "old.txt"
    old.write_text("from the past")
    os.utime(old, (-86400 * 365, -86400 * 365))
    server = rush_server("async_app")
    response = httpx.get(f"{server.url}/file", params={"path": str(old)}, timeout=GUARD_TIMEOUT)
    assert response.status_code == 200
    assert response.text == "from the past"
    assert response.headers["last-modified"] == "Thu, 01 Jan 1970 00:00:00 GMT"


@pytest.mark.parametrize("kind", ["negative", "closed", "regular-file", "not-listening"])
def test_server_refuses_a_listener_fd_that_is_not_a_listening_socket(kind: str, tmp_path: Path) -> None:
    code = f"""
import os, socket
from rush._rush import Router, Server
from rush.config import Config
from rush.worker import app_server_settings, log_settings
kind = {kind!r}
if kind == "negative":
    fd = -1
elif kind == "closed":
    fd = os.open(os.devnull, os.O_RDONLY); os.close(fd)
elif kind == "regular-file":
    fd = os.open(os.devnull, os.O_RDONLY)
else:
    fd = socket.socket().detach()
try:
    config = Config()
    Server([(fd, False)], app_server_settings(config, Router()), log_settings(config))
except ValueError as error:
    print("refused:", error)
"""
    result = subprocess.run(
        [str(RUSH.parent / "python"), "-c", code], capture_output=True, text=True, timeout=GUARD_TIMEOUT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: listener_fd"), result.stdout + result.stderr


# -- accept() errors ---------------------------------------------------------


def test_connections_queued_behind_emfile_are_served_once_fds_free_up(rush_server: ServerFactory) -> None:
    # A worker allowed few descriptors: accept() fails with EMFILE while
    # connections wait in the backlog. Once some close, the queued ones must
    # be served without waiting for another newcomer to wake the listener.
    server = rush_server("basic", command=["prlimit", "--nofile=48:48", str(RUSH)])
    clients = [server.connect() for _ in range(60)]
    try:
        for client in clients:
            client.send(request("GET", "/"))
        answered: list[int] = []

        def some_answered() -> bool:
            readable, _, _ = select.select([client.sock for client in clients], [], [], 0.05)
            answered.extend(index for index, client in enumerate(clients) if client.sock in readable)
            return bool(answered)

        wait_for(some_answered, "no connection was served at all")
        waiting = [client for index, client in enumerate(clients) if index not in set(answered)]
        assert waiting, "every connection was accepted: the fd limit did not bite"
        server.wait_for_log("accept failed")
        for index in set(answered):
            clients[index].close()
        for client in waiting:
            assert client.read_response().status == 200
    finally:
        for client in clients:
            client.close()


# -- the worker's output budget ----------------------------------------------


def worker_output_growth_kib(rush_server: ServerFactory, *budget: str) -> int:
    """RSS a worker gains while 100 clients pipeline requests for 256 KiB
    bodies and never read. Each connection stops at its own 1 MiB high-water
    mark; the worker-wide budget must stop them much earlier."""
    server = rush_server("basic", *budget)
    worker = server.single_worker()
    before = peak_rss_kib(worker)
    pipeline = request("GET", f"/big?size={256 * 1024}") * 16
    clients = [server.connect(rcvbuf=4096) for _ in range(100)]
    try:
        for client in clients:
            client.send(pipeline)
        # A fresh connection is answered after the loop has handled what the
        # 100 clients sent before it (epoll reports readiness in order).
        with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as probe:
            assert probe.get("/").status_code == 200
        server.assert_running()
        return peak_rss_kib(worker) - before
    finally:
        for client in clients:
            client.close()


def test_300_pipelining_clients_that_never_read_stay_within_the_default_budget(rush_server: ServerFactory) -> None:
    """Issue 22's shape: 300 clients each pipeline 64 requests for 64 KiB
    answers and never read (4 KiB receive buffers). The worker's growth
    stays within the default --max-worker-output (64 MiB) plus 32 MiB, and a
    fresh client is answered beside them."""
    server = rush_server("basic")
    worker = server.single_worker()
    before = peak_rss_kib(worker)
    pipeline = request("GET", f"/big?size={64 * 1024}") * 64
    clients = [server.connect(rcvbuf=4096) for _ in range(300)]
    try:
        for client in clients:
            client.send(pipeline)
        for _ in range(2):
            with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as probe:
                assert probe.get("/").status_code == 200
        server.assert_running()
        growth = peak_rss_kib(worker) - before
    finally:
        for client in clients:
            client.close()
    print(f"\nRSS growth for 300 pipelining clients that never read: {growth // 1024} MiB")
    assert growth <= (64 + 32) * 1024, f"{growth // 1024} MiB"


def test_the_worker_output_budget_bounds_what_clients_that_never_read_cost(rush_server: ServerFactory) -> None:
    bounded = worker_output_growth_kib(rush_server, "--max-worker-output", "2M")
    unbounded = worker_output_growth_kib(rush_server, "--max-worker-output", "1G")
    print(
        f"\nRSS growth for 100 clients that never read: {bounded} KiB with a 2 MiB budget, {unbounded} KiB with 1 GiB"
    )
    # The budget, plus per connection at most 64 KiB and one 256 KiB response.
    assert bounded < 48 * 1024
    # Without it, each connection holds up to 1 MiB: the test does measure the bound.
    assert unbounded > 2 * bounded
