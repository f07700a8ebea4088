"""Graceful reloads and stops lose no request, under a real load generator.

wrk keeps 50 keep-alive connections busy while the server is reloaded
twice (SIGHUP: workers replaced one by one) and one of its two workers is
stopped with SIGTERM. A draining worker must not close a connection its
client may just have sent a request on: it answers that request with
``Connection: close`` (wrk then reconnects, to a live worker) and closes
only connections that stayed silent. wrk counts every connection error and
every non-2xx answer; both must be zero.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess

import httpx
import pytest
from support import GUARD_TIMEOUT, ServerFactory, wait_for

WRK = shutil.which("wrk")
WRK_SECONDS = 8


def parse_wrk(output: str) -> tuple[int, int, int]:
    """(requests, socket errors, non-2xx responses) from wrk's summary."""
    requests = int(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    socket_errors = sum(int(count) for count in errors.groups()) if errors else 0
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    return requests, socket_errors, int(non_2xx.group(1)) if non_2xx else 0


@pytest.mark.skipif(WRK is None, reason="wrk is not installed (make test installs it with apt)")
def test_two_reloads_and_a_worker_stop_under_load_fail_no_request(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--workers", "2", bind="port", allow_worker_deaths=True)
    first = server.wait_for_workers(2)
    load = subprocess.Popen(
        [str(WRK), "-t1", "-c50", f"-d{WRK_SECONDS}s", f"{server.url}/"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Touch nothing before wrk's requests are being served (each worker
        # counts the requests its handler saw).
        with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
            wait_for(lambda: client.get("/count").json()["calls"] > 100, "wrk's load to reach the server")
        seen = set(first)
        for _ in range(2):
            server.send_signal(signal.SIGHUP)
            # Reloaded: two workers again, none of them from before.
            seen = wait_for(
                lambda seen=seen: (pids := server.worker_pids()) and len(pids) == 2 and not pids & seen and pids,
                "the reload to replace both workers",
            )
        # One worker stopped on its own (the supervisor replaces it).
        victim = min(seen)
        os.kill(victim, signal.SIGTERM)
        wait_for(lambda: victim not in server.worker_pids(), "the stopped worker to exit")
        output, _ = load.communicate(timeout=WRK_SECONDS + GUARD_TIMEOUT)
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()
    requests, socket_errors, non_2xx = parse_wrk(output)
    print(
        f"\nwrk through 2 reloads and a worker stop: {requests} requests, "
        f"{socket_errors} socket errors, {non_2xx} non-2xx"
    )
    assert requests > 1000, output
    assert socket_errors == 0, output
    assert non_2xx == 0, output
