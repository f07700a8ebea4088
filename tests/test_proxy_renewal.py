"""`rush proxy` workers renewed while serving, over real sockets, as app
server workers are (test_renewal.py): ``--max-requests`` counts each request
a proxy worker relays and each CONNECT tunnel it opens, and the worker that
reaches it is replaced with its successor ready first and no failed request;
``--timeout`` kills a proxy worker whose loop stops turning (stopped here with
SIGSTOP, the honest way to freeze a loop that runs no app code) and starts a
new one.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable

from proxy_support import tunnel
from support import GUARD_TIMEOUT, RUSH, RushServer, ServerFactory, request, wait_for

# The fixtures (origin, proxy...) come from proxy_fixtures.py.
pytest_plugins = ("proxy_fixtures",)


def forwarded(server: RushServer, origin: RushServer) -> bytes:
    """One absolute-form request through the proxy on a new connection; the origin's answer."""
    with server.connect() as connection:
        connection.send(
            f"GET http://127.0.0.1:{origin.port}/ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
        )
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200], result
    return result.responses[0].body


def tunnelled(server: RushServer, origin: RushServer) -> bytes:
    """One request to the origin through a CONNECT tunnel; the origin's answer."""
    with tunnel(server, origin.port) as sock:
        sock.sendall(request("GET", "/", [("Connection", "close")]))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    return answer


def test_proxy_workers_are_recycled_at_max_requests_without_a_failed_request(
    rush_server: ServerFactory, origin: RushServer
) -> None:
    """200 requests, half relayed and half through tunnels, each on its own
    connection, against two workers of 50 requests each: workers are
    replaced while the requests go on, and every request is answered
    (forwarded and tunnelled fail otherwise)."""
    server = rush_server(
        "",
        "--workers",
        "2",
        "--max-requests",
        "50",
        "--allow-private",
        "--allow-connect-port",
        str(origin.port),
        bind="port",
        command=[str(RUSH), "proxy"],
    )
    first = server.wait_for_workers(2)
    for index in range(200):
        body = forwarded(server, origin) if index % 2 == 0 else tunnelled(server, origin)
        assert body.endswith(b"Hello, World!")
    recycle = r"worker (\d+) began (\d+) requests \(--max-requests 50, 50 with its jitter\): replacing it"
    recycled = server.wait_for_log(recycle, count=2)
    # Counted by the worker itself: none went past its limit before it stopped accepting.
    assert all(int(match.group(2)) == 50 for match in recycled), [match.group(0) for match in recycled]
    assert first & {int(match.group(1)) for match in recycled}, "the first workers were recycled"
    server.wait_for_log(r"retiring worker \d+: replaced by worker \d+ \(--max-requests", count=2)
    now = server.wait_for_workers(2)
    assert now != first, f"the workers were not replaced: {first} then {now}"
    assert "reached --max-requests: no longer accepting" in server.stderr_text()


def test_a_stuck_proxy_worker_is_killed_and_replaced(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    server = proxy("--allow-private", "--timeout", "2")
    server.allow_worker_deaths = True
    stuck = server.single_worker()
    assert forwarded(server, origin).endswith(b"Hello, World!")
    # SIGSTOP freezes the worker's loop (and everything else in it): its
    # heartbeat on the liveness page stops, as a blocked loop's would.
    os.kill(stuck, signal.SIGSTOP)
    try:
        server.wait_for_log(
            rf"worker {stuck} is stuck: its loop has not come back for [\d.]+ s \(--timeout 2 s\), "
            + re.escape("last request begun: 'GET http://127.0.0.1:")
        )
        server.wait_for_log(rf"retired worker {stuck} exited \(signal SIGKILL\); it was retired: stuck for")
    finally:
        # Only if the test failed before the supervisor killed it.
        try:
            os.kill(stuck, signal.SIGKILL)
        except ProcessLookupError:
            pass
    replacement = wait_for(
        lambda: (pids := server.worker_pids()) and stuck not in pids and len(pids) == 1 and pids,
        "a new proxy worker",
    )
    assert stuck not in replacement
    assert forwarded(server, origin).endswith(b"Hello, World!")


def test_an_idle_proxy_worker_is_not_taken_for_stuck(proxy: Callable[..., RushServer], origin: RushServer) -> None:
    """The loop beats while it waits for nothing (at least once a second),
    so a quiet proxy worker holding an idle tunnel outlives a --timeout of
    2 s by far."""
    server = proxy("--allow-private", "--allow-connect-port", str(origin.port), "--timeout", "2")
    worker = server.single_worker()
    with tunnel(server, origin.port) as sock:
        sock.settimeout(GUARD_TIMEOUT)
        # Not a synchronisation: a quiet window of several timeouts that the
        # supervisor's checkups (twice a second) must get through.
        time.sleep(5)
        assert "is stuck" not in server.stderr_text(), server.describe()
        sock.sendall(request("GET", "/", [("Connection", "close")]))
        assert sock.recv(12).startswith(b"HTTP/1.1 200")
    assert server.single_worker() == worker
