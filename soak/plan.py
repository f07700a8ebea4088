"""What the soak runs: the servers, their limits, the static site, and the
traffic (how many connections, how fast, what each request must get back).

Everything here is shared by the orchestrator (soak/run.py) and the two
client processes (soak/wellformed.py, soak/hostile.py), which receive the
servers' ports in a small JSON file.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass, field, replace
from typing import Any

from soak.apps import GREETING, JSON_DOC, stream_chunks

HOST = "127.0.0.1"
WORKERS = 2

# The limits every server runs with, given explicitly so the report can name them
# (they are rush's defaults) and the hostile clients know what to exceed or outwait.
HEADER_TIMEOUT = 10.0
KEEP_ALIVE_TIMEOUT = 5.0
SEND_TIMEOUT = 30.0
GRACEFUL_TIMEOUT = 30.0
MAX_HEAD_SIZE = 16384

SERVER_FLAGS = [
    "--workers",
    str(WORKERS),
    "--header-timeout",
    str(HEADER_TIMEOUT),
    "--keep-alive-timeout",
    str(KEEP_ALIVE_TIMEOUT),
    "--send-timeout",
    str(SEND_TIMEOUT),
    "--graceful-timeout",
    str(GRACEFUL_TIMEOUT),
    "--max-head-size",
    str(MAX_HEAD_SIZE),
    "--log-level",
    "info",
]

# One rush process serves one app: three servers. The rush App also carries the static mount.
SERVERS = {
    "rush": "soak.apps:app",
    "wsgi": "soak.apps:wsgi_app",
    "asgi": "soak.apps:asgi_app",
}
STATIC_PREFIX = "/static"

# Timing of the run.
HUP_INTERVAL = 60.0  # each supervisor gets a SIGHUP this often...
HUP_STAGGER = 20.0  # ...server i first at HUP_INTERVAL + i * HUP_STAGGER, so reloads do not pile up
SAMPLE_INTERVAL = 10.0  # RSS of every worker and supervisor
RSS_AGE = 50.0  # workers are compared at this age (seconds since they started)
EARLY_AGE = 20.0  # and within one worker's life, from this age to RSS_AGE
RSS_TOLERANCE = 0.10

# A well-formed request must be answered within this (a failure guard, not a latency target).
REQUEST_TIMEOUT = 10.0
CONNECT_TIMEOUT = 5.0


# ---------------------------------------------------------------------------
# The static site (generated the same way by the orchestrator and the clients)


def site_files() -> dict[str, bytes]:
    """Name -> content of the files under the static mount: a small text file
    (kept in memory by rush), a medium one (memory too) and a large one (over
    1 MiB: always sent with sendfile)."""
    generator = random.Random(20261125)
    small = ("".join(f"line {index:04d} of the soak's small file\n" for index in range(120))).encode()[:4096]
    return {
        "index.html": b"<!doctype html><title>soak</title><p>static index</p>\n",
        "small.txt": small,
        "medium.bin": generator.randbytes(512 * 1024),
        "large.bin": generator.randbytes(3 * 1024 * 1024),
    }


# ---------------------------------------------------------------------------
# Well-formed traffic


@dataclass(frozen=True)
class Check:
    """One request and what its response must be."""

    name: str
    method: str = "GET"
    target: str = "/"
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    status: int = 200
    expect_body: bytes | None = None  # exact body
    expect_json: Any = None  # body parsed as JSON equals this
    expect_length: int | None = None
    expect_header: tuple[str, str] | None = None  # (lower-case name, value)
    conditional: bool = False  # If-None-Match with the ETag last seen for the target (304), 200 before one is known

    def request_bytes(self, etag: str | None = None) -> bytes:
        lines = [f"{self.method} {self.target} HTTP/1.1", "Host: soak"]
        lines += [f"{name}: {value}" for name, value in self.headers]
        if self.conditional and etag:
            lines.append(f"If-None-Match: {etag}")
        if self.body:
            lines.append(f"Content-Length: {len(self.body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


ECHO_BODY = bytes(range(256)) * 4


def common_checks(interface: str) -> list[Check]:
    greeting = GREETING.format(interface=interface).encode()
    return [
        Check("GET /", expect_body=greeting),
        Check("GET /json", target="/json", expect_json=JSON_DOC),
        Check("GET /items/n", target="/items/7", expect_body=b"item 7"),
        Check(
            "POST /echo",
            method="POST",
            target="/echo",
            body=ECHO_BODY,
            headers=(("Content-Type", "application/octet-stream"),),
            expect_json={"length": len(ECHO_BODY), "sha256": hashlib.sha256(ECHO_BODY).hexdigest()},
        ),
        Check("GET /stream", target="/stream?chunks=8", expect_body=b"".join(stream_chunks(8))),
        Check("HEAD /", method="HEAD", expect_body=b""),
        Check("GET unknown (404)", target="/no/such/path", status=404),
    ]


def keepalive_checks(server: str) -> list[Check]:
    checks = common_checks(server)
    if server == "rush":
        checks.append(Check("GET /old (301)", target="/old", status=301, expect_header=("location", "/")))
    if server == "asgi":
        checks.append(Check("GET /sleep", target="/sleep?ms=2", expect_body=b"slept"))
    return checks


def pipeline_checks(server: str) -> list[Check]:
    greeting = GREETING.format(interface=server).encode()
    return [
        Check("GET /", expect_body=greeting),
        Check("GET /json", target="/json", expect_json=JSON_DOC),
        Check("GET /items/n", target="/items/16", expect_body=b"item 16"),
        Check("GET unknown (404)", target="/missing", status=404),
    ]


def static_checks() -> list[Check]:
    files = site_files()
    small, medium, large = files["small.txt"], files["medium.bin"], files["large.bin"]
    prefix = STATIC_PREFIX
    return [
        Check("static small", target=f"{prefix}/small.txt", expect_body=small),
        # A 304 once the client knows the file's ETag (a 200 with the whole file before).
        Check(
            "static small If-None-Match (304)",
            target=f"{prefix}/small.txt",
            status=304,
            conditional=True,
            expect_body=small,
        ),
        Check(
            "static small range (206)",
            target=f"{prefix}/small.txt",
            headers=(("Range", "bytes=100-1123"),),
            status=206,
            expect_body=small[100:1124],
        ),
        Check("static medium", target=f"{prefix}/medium.bin", expect_body=medium),
        Check("static index", target=f"{prefix}/", expect_body=files["index.html"]),
        Check("static missing (404)", target=f"{prefix}/missing.txt", status=404),
        Check("static small", target=f"{prefix}/small.txt", expect_body=small),
        Check("static large (sendfile)", target=f"{prefix}/large.bin", expect_body=large),
    ]


@dataclass(frozen=True)
class Scenario:
    """``connections`` client connections to ``server``, each sending a batch of
    ``depth`` requests (pipelined when more than one) every ``1 / rate`` seconds,
    cycling through ``checks``; ``fresh`` opens a new connection for every batch
    (and asks the server to close it)."""

    name: str
    server: str
    checks: list[Check] = field(hash=False)
    connections: int
    rate: float  # batches per second per connection
    depth: int = 1
    fresh: bool = False


def rate_scale() -> float:
    """SOAK_RATE multiplies every well-formed rate (default 1: about 750 requests/s in all), within 0.1 to 10."""
    scale = float(os.environ.get("SOAK_RATE") or 1)
    if not 0.1 <= scale <= 10:
        raise ValueError(f"SOAK_RATE must be between 0.1 and 10 (got {scale})")
    return scale


def wellformed_scenarios() -> list[Scenario]:
    scale = rate_scale()
    scenarios = []
    for server in SERVERS:
        scenarios.append(Scenario(f"{server} keep-alive", server, keepalive_checks(server), connections=4, rate=40))
        scenarios.append(
            Scenario(f"{server} pipelined x16", server, pipeline_checks(server), connections=1, rate=4, depth=16)
        )
        scenarios.append(
            Scenario(
                f"{server} new connection each",
                server,
                [
                    Check(
                        "GET / Connection: close",
                        headers=(("Connection", "close"),),
                        expect_body=GREETING.format(interface=server).encode(),
                    )
                ],
                connections=1,
                rate=10,
                fresh=True,
            )
        )
    scenarios.append(Scenario("rush static", "rush", static_checks(), connections=2, rate=20))
    return [replace(scenario, rate=scenario.rate * scale) for scenario in scenarios]


# ---------------------------------------------------------------------------
# Hostile clients (per server)

SLOWLORIS_CONNECTIONS = 20  # dripping one byte per second each, per server
SLOWLORIS_GIVE_UP = 60.0  # a slowloris still open after this is counted as "never timed out"
OVERSIZE_INTERVAL = 2.0
HALF_CLOSE_INTERVAL = 1.0
RESET_REQUEST_INTERVAL = 1.0
RESET_RESPONSE_INTERVAL = 2.0
NEVER_READ_CONNECTIONS = 2  # per server
NEVER_READ_HOLD = SEND_TIMEOUT + 10.0  # longer than the server's send timeout
NEVER_READ_RCVBUF = 4096
HOSTILE_READ_LIMIT = 15.0  # longest wait for the server's answer or close


def large_targets(server: str) -> list[tuple[str, int]]:
    """Large responses for the clients that stop reading or reset mid-response: (target, body size)."""
    if server == "rush":
        return [(f"{STATIC_PREFIX}/large.bin", len(site_files()["large.bin"])), ("/big?size=4194304", 4194304)]
    return [("/big?size=8388608", 8388608)]


def write_ports(path: str, ports: dict[str, int], started_at: float, deadline: float) -> None:
    with open(path, "w") as handle:
        json.dump({"ports": ports, "started_at": started_at, "deadline": deadline}, handle)


def read_ports(path: str) -> dict[str, Any]:
    with open(path) as handle:
        return json.load(handle)
