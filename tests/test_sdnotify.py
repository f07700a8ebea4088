"""systemd readiness (python/rush/sdnotify.py): rush started with
``NOTIFY_SOCKET`` pointing to a datagram socket this test binds, as systemd
does for a ``Type=notify`` unit. The oracle is the protocol of sd_notify(3)
(one datagram of ``KEY=VALUE`` lines per message), cross-checked against
the datagram systemd's own ``systemd-notify`` sends; a real systemd is not
usable here (no systemd as PID 1 in the container, so no ``systemd-run``).

The order of the messages is checked against what the server's log and
its port show when each arrives: ``READY=1`` only once every worker said
it serves (and the port answers), ``RELOADING=1`` with a
``MONOTONIC_USEC`` taken between the SIGHUP and its arrival, ``READY=1``
once the reload finished, ``STATUS=`` when a worker dies and when its
successor serves, ``STOPPING=1`` at SIGTERM.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, clean_environment, request

SYSTEMD_NOTIFY = shutil.which("systemd-notify")


class NotifyListener:
    """The datagram socket systemd would listen on; records every message."""

    def __init__(self, address: str) -> None:
        self.variable = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        self.messages: list[dict[str, str]] = []
        self.raw: list[bytes] = []

    def close(self) -> None:
        self.sock.close()

    def receive(self, timeout: float = GUARD_TIMEOUT) -> dict[str, str]:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"no message within {timeout}s; so far: {self.messages}") from None
        self.raw.append(data)
        message = dict(line.split("=", 1) for line in data.decode().split("\n"))
        self.messages.append(message)
        return message

    def next_message(self, skip_watchdog: bool = True) -> dict[str, str]:
        """The next message (not a WATCHDOG=1 one, unless asked)."""
        for _ in range(1000):
            message = self.receive()
            if not (skip_watchdog and message == {"WATCHDOG": "1"}):
                return message
        raise AssertionError(f"only watchdog messages: {self.messages[-5:]}")

    def pending(self) -> list[dict[str, str]]:
        """Messages already queued, without waiting."""
        found = []
        self.sock.setblocking(False)
        try:
            for _ in range(10000):
                found.append(self.receive_now())
        except BlockingIOError:
            pass
        return found

    def receive_now(self) -> dict[str, str]:
        data = self.sock.recv(65536)
        self.raw.append(data)
        message = dict(line.split("=", 1) for line in data.decode().split("\n"))
        self.messages.append(message)
        return message


@pytest.fixture
def listener(tmp_path: Path) -> Iterator[NotifyListener]:
    created = NotifyListener(str(tmp_path / "notify"))
    yield created
    created.close()


def start(
    rush_server: ServerFactory, listener: NotifyListener, *args: str, app: str = "basic", **env: str
) -> RushServer:
    environment = clean_environment({"NOTIFY_SOCKET": listener.variable, **env})
    return rush_server(app, *args, env=environment, wait=False, allow_worker_deaths=True)


def monotonic_usec() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000


def answers(server: RushServer) -> bool:
    with server.connect() as connection:
        connection.send(request())
        return connection.read_response().status == 200


def test_ready_reloading_status_and_stopping_in_order(rush_server: ServerFactory, listener: NotifyListener) -> None:
    server = start(rush_server, listener, "--workers", "2")
    ready = listener.next_message()
    assert ready.get("READY") == "1", ready
    # Every worker had said it serves before READY=1 was sent (the log is written first).
    assert len(re.findall(r"worker \d+ serving", server.stderr_text())) == 2, server.describe()
    assert "2 of 2 worker(s) serving on" in ready["STATUS"], ready
    assert answers(server)

    for reload in (1, 2):
        before = monotonic_usec()
        server.send_signal(signal.SIGHUP)
        reloading = listener.next_message()
        after = monotonic_usec()
        assert reloading.get("RELOADING") == "1", reloading
        assert before <= int(reloading["MONOTONIC_USEC"]) <= after, (before, reloading, after)
        ready = listener.next_message()
        assert ready.get("READY") == "1", ready
        assert server.stderr_text().count("reload finished: 2 worker(s) replaced") == reload, server.describe()
        assert answers(server)

    victim = sorted(server.wait_for_workers(2))[0]
    os.kill(victim, signal.SIGKILL)
    down = listener.next_message()
    assert down == {"STATUS": down["STATUS"]} and down["STATUS"].startswith("1 of 2 worker(s) serving"), down
    back = listener.next_message()
    assert back == {"STATUS": back["STATUS"]} and back["STATUS"].startswith("2 of 2 worker(s) serving"), back
    assert victim not in server.wait_for_workers(2)

    server.send_signal(signal.SIGTERM)
    stopping = listener.next_message()
    assert stopping.get("STOPPING") == "1", stopping
    assert server.wait_exit() == 0
    assert [message for message in listener.pending() if message != {"WATCHDOG": "1"}] == []
    kinds = [next(iter(message)) for message in listener.messages if message != {"WATCHDOG": "1"}]
    assert kinds == ["READY", "RELOADING", "READY", "RELOADING", "READY", "STATUS", "STATUS", "STOPPING"]


def test_watchdog_every_half_interval_unless_it_is_for_another_pid(
    rush_server: ServerFactory, tmp_path: Path, listener: NotifyListener
) -> None:
    other = NotifyListener(str(tmp_path / "other"))
    try:
        # WATCHDOG_PID names another process: this supervisor must not feed that watchdog.
        not_ours = start(rush_server, other, WATCHDOG_USEC="200000", WATCHDOG_PID="1")
        assert other.next_message().get("READY") == "1"
        ours = start(rush_server, listener, WATCHDOG_USEC="200000")
        assert listener.next_message().get("READY") == "1"
        pings = 0
        for _ in range(1000):  # bounded by the guard timeout of each receive
            if listener.receive() == {"WATCHDOG": "1"}:
                pings += 1
            if pings >= 3:
                break
        assert pings >= 3
        # Both loops ran meanwhile, at the same interval: the other one sent no WATCHDOG=1.
        assert {"WATCHDOG": "1"} not in other.pending() + other.messages
        assert ours.stop() == 0 and not_ours.stop() == 0
    finally:
        other.close()


def test_the_workers_do_not_see_the_notify_variables(rush_server: ServerFactory, listener: NotifyListener) -> None:
    server = start(rush_server, listener, app="environment", WATCHDOG_USEC="30000000", WATCHDOG_PID="1")
    assert listener.next_message().get("READY") == "1"
    with server.connect() as connection:
        connection.send(request())
        environment = connection.read_response().json()
    assert not {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} & set(environment), environment


def test_an_abstract_socket_is_notified(rush_server: ServerFactory) -> None:
    abstract = NotifyListener(f"@rush-test-{uuid.uuid4().hex}")
    try:
        start(rush_server, abstract)
        assert abstract.next_message().get("READY") == "1"
    finally:
        abstract.close()


def test_a_notify_socket_nobody_listens_on_is_said_once(rush_server: ServerFactory, tmp_path: Path) -> None:
    environment = clean_environment({"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    server = rush_server("basic", "--workers", "2", env=environment)
    server.wait_for_log(r"cannot notify NOTIFY_SOCKET")  # READY=1 once both workers serve
    server.send_signal(signal.SIGHUP)  # RELOADING=1, then READY=1 again: not said again
    server.wait_for_log(r"reload finished")
    # A later event, handled after the READY=1 that followed the reload (and sending a STATUS).
    server.send_signal(signal.SIGTTIN)
    server.wait_for_log(r"received SIGTTIN")
    assert answers(server)
    assert server.stderr_text().count("cannot notify NOTIFY_SOCKET") == 1, server.describe()


@pytest.mark.skipif(SYSTEMD_NOTIFY is None, reason="systemd-notify is not installed")
def test_ready_is_framed_as_systemd_notify_frames_it(rush_server: ServerFactory, listener: NotifyListener) -> None:
    subprocess.run(
        [str(SYSTEMD_NOTIFY), "--no-block", "--ready", "--status=checking the framing"],
        env={**os.environ, "NOTIFY_SOCKET": listener.variable},
        check=True,
        timeout=GUARD_TIMEOUT,
    )
    reference = listener.next_message()
    start(rush_server, listener)
    ours = listener.next_message()
    assert list(reference) == list(ours) == ["READY", "STATUS"]
    # Lines joined by a newline, none after the last, as systemd writes them.
    assert listener.raw[0].count(b"\n") == listener.raw[1].count(b"\n") == 1
    assert not listener.raw[1].endswith(b"\n")
