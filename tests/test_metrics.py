"""``--metrics``: Prometheus text from the supervisor, summed over the
workers, checked against the requests this test made over real sockets."""

from __future__ import annotations

import os
import re
import signal

import httpx
import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, free_port, request, wait_for


def scrape(port: int) -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=GUARD_TIMEOUT).text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


@pytest.fixture
def metered(rush_server: ServerFactory) -> tuple[RushServer, int]:
    port = free_port()
    return rush_server("basic", "--workers", "2", "--metrics", f"127.0.0.1:{port}"), port


def test_requests_refusals_connections_and_bytes_are_counted(metered: tuple[RushServer, int]) -> None:
    server, port = metered
    # The start-up check's own requests are counted too: compare with a baseline.
    before = scrape(port)
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        for _ in range(20):
            assert client.get("/").status_code == 200
        assert client.get("/no-such-page").status_code == 404
    with server.connect() as connection:
        connection.send(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
        assert connection.read_response().status == 400
    samples = scrape(port)

    def grew(name: str) -> float:
        return samples[name] - before[name]

    assert grew('rush_request_duration_seconds_count{status="2xx"}') == 20
    assert grew('rush_request_duration_seconds_bucket{status="2xx",le="+Inf"}') == 20
    assert grew('rush_request_duration_seconds_count{status="4xx"}') == 1
    assert grew('rush_requests_refused_total{status="400"}') == 1
    assert grew("rush_connections_accepted_total") == 2
    assert grew("rush_received_bytes_total") > 20 * len(request("GET", "/"))
    assert grew("rush_sent_bytes_total") > 0
    buckets = [
        value for name, value in samples.items() if name.startswith('rush_request_duration_seconds_bucket{status="2xx"')
    ]
    assert buckets == sorted(buckets), "buckets are cumulative"


def test_worker_exits_are_counted_by_cause(metered: tuple[RushServer, int]) -> None:
    server, port = metered
    server.allow_worker_deaths = True
    victim = min(server.worker_pids())
    os.kill(victim, signal.SIGKILL)
    wait_for(
        lambda: scrape(port).get('rush_worker_exits_total{cause="died"}') == 1,
        f"the dead worker {victim} to be counted",
    )


def test_metrics_take_host_and_port(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--metrics", "nonsense", wait=False)
    assert server.wait_exit() != 0
    assert re.search(r"--metrics takes HOST:PORT", server.stderr_path.read_text())
