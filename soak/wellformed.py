"""The well-formed traffic: ``python -m soak.wellformed PORTS_FILE OUT_FILE``.

Runs every scenario of `soak.plan.wellformed_scenarios` until the deadline in
PORTS_FILE and writes its counts to OUT_FILE (every few seconds while it
runs, and once more at the end with ``"finished": true``).

Every request attempt is counted once: as ``ok`` when its response is the one
its `Check` expects, or as a failure of one kind (`soak.http.failure_kind`,
plus ``bad_status``/``bad_body``/``bad_header`` for a wrong answer and
``unanswered`` for requests of a pipelined batch left without a response
after the server announced ``Connection: close``). Nothing is retried: a
failed connection is replaced by a new one for the next batch.

A keep-alive connection that the server closed while it was idle (noticed
before the next request is written) is not a failure: it is counted under
``info.idle_closed`` and replaced. The window in which a close can cross a
request already written is a real race of HTTP/1.1 keep-alive; such a
request counts as a failure (``closed`` or ``reset``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time
from collections import Counter, defaultdict
from typing import Any

from soak.http import Response, failure_kind, read_response
from soak.plan import CONNECT_TIMEOUT, HOST, REQUEST_TIMEOUT, Check, Scenario, read_ports, wellformed_scenarios

MAX_EVENTS = 1000
SNAPSHOT_INTERVAL = 5.0


class Stats:
    def __init__(self, started_at: float) -> None:
        self.started_at = started_at
        self.scenarios: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.events_dropped = 0
        # server -> second since the start -> failed attempts in that second
        self.timeline: dict[str, Counter[int]] = defaultdict(Counter)

    def entry(self, scenario: Scenario) -> dict[str, Any]:
        if scenario.name not in self.scenarios:
            self.scenarios[scenario.name] = {
                "server": scenario.server,
                "ok": 0,
                "failed": Counter(),
                "statuses": Counter(),
                "info": Counter(),
            }
        return self.scenarios[scenario.name]

    def ok(self, scenario: Scenario, status: int) -> None:
        entry = self.entry(scenario)
        entry["ok"] += 1
        entry["statuses"][str(status)] += 1

    def fail(self, scenario: Scenario, kind: str, detail: str, count: int = 1, status: int | None = None) -> None:
        if count <= 0:
            return
        entry = self.entry(scenario)
        entry["failed"][kind] += count
        if status is not None:
            entry["statuses"][str(status)] += 1
        now = time.time()
        self.timeline[scenario.server][int(now - self.started_at)] += count
        if len(self.events) < MAX_EVENTS:
            self.events.append(
                {
                    "t": round(now - self.started_at, 3),
                    "server": scenario.server,
                    "scenario": scenario.name,
                    "kind": kind,
                    "count": count,
                    "detail": detail[:300],
                }
            )
        else:
            self.events_dropped += 1

    def info(self, scenario: Scenario, key: str) -> None:
        self.entry(scenario)["info"][key] += 1

    def snapshot(self, finished: bool) -> dict[str, Any]:
        return {
            "finished": finished,
            "scenarios": {
                name: {**entry, **{key: dict(entry[key]) for key in ("failed", "statuses", "info")}}
                for name, entry in self.scenarios.items()
            },
            "events": self.events,
            "events_dropped": self.events_dropped,
            "timeline": {server: dict(seconds) for server, seconds in self.timeline.items()},
        }


def write_json(path: str, value: Any) -> None:
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        json.dump(value, handle)
    os.replace(temporary, path)


class Client:
    """One client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Client:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            reader, writer = await asyncio.open_connection(HOST, port, limit=65536)
        return cls(reader, writer)

    def closed_while_idle(self) -> bool:
        return self.reader.at_eof() or self.reader.exception() is not None or self.writer.is_closing()

    def close(self) -> None:
        if self.reader.exception() is not None:
            self.writer.transport.abort()
        else:
            self.writer.close()


def verify(check: Check, response: Response, conditional_sent: bool) -> tuple[str, str] | None:
    """None when ``response`` is what ``check`` expects, else (failure kind, detail)."""
    expected_status = check.status if (not check.conditional or conditional_sent) else 200
    if response.status != expected_status:
        return (
            "bad_status",
            f"{check.name}: status {response.status}, expected {expected_status}: {response.body[:120]!r}",
        )
    if check.expect_header is not None:
        name, value = check.expect_header
        if response.headers.get(name) != value:
            return "bad_header", f"{check.name}: {name}: {response.headers.get(name)!r}, expected {value!r}"
    if check.conditional and conditional_sent:
        return None if response.body == b"" else ("bad_body", f"{check.name}: a 304 with a body")
    if check.expect_body is not None and response.body != check.expect_body:
        return "bad_body", f"{check.name}: {len(response.body)} bytes, expected {len(check.expect_body)}"
    if check.expect_json is not None:
        try:
            value = response.json()
        except ValueError:
            return "bad_body", f"{check.name}: not JSON: {response.body[:120]!r}"
        if value != check.expect_json:
            return "bad_body", f"{check.name}: {value!r}, expected {check.expect_json!r}"
    return None


async def exchange(
    client: Client, checks: list[Check], scenario: Scenario, stats: Stats, etags: dict[str, str]
) -> bool:
    """Sends ``checks`` in one write and reads their responses; counts each.
    Returns whether the connection can be used again."""
    sent_conditional = [check.conditional and check.target in etags for check in checks]
    data = b"".join(check.request_bytes(etags.get(check.target)) for check in checks)
    answered = 0
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT):
            client.writer.write(data)
            await client.writer.drain()
            for check, conditional in zip(checks, sent_conditional, strict=True):
                response = await read_response(client.reader, check.method)
                answered += 1
                problem = verify(check, response, conditional)
                if problem is None:
                    stats.ok(scenario, response.status)
                    if response.status == 200 and "etag" in response.headers:
                        etags[check.target] = response.headers["etag"]
                else:
                    stats.fail(scenario, problem[0], problem[1], status=response.status)
                if response.closes:
                    break
    except Exception as error:  # noqa: BLE001 - every failure is counted by kind
        stats.fail(scenario, failure_kind(error), f"{type(error).__name__}: {error}", count=len(checks) - answered)
        return False
    if answered < len(checks):
        stats.fail(
            scenario,
            "unanswered",
            f"{len(checks) - answered} of {len(checks)} pipelined requests unanswered after Connection: close",
            count=len(checks) - answered,
        )
        return False
    if response.closes and not scenario.fresh:
        stats.info(scenario, "closed_after_response")
    return not response.closes


async def connection_loop(scenario: Scenario, port: int, deadline: float, stats: Stats, etags: dict[str, str]) -> None:
    loop = asyncio.get_running_loop()
    interval = 1.0 / scenario.rate
    next_at = loop.time() + random.uniform(0, interval)
    position = random.randrange(len(scenario.checks))
    client: Client | None = None
    try:
        while True:
            now = loop.time()
            if next_at < now - 1.0:
                next_at = now  # fell far behind (a slow response): no burst to catch up
            if time.time() + (next_at - now) >= deadline:
                break
            await asyncio.sleep(max(0.0, next_at - now))
            next_at += interval
            batch = [scenario.checks[(position + index) % len(scenario.checks)] for index in range(scenario.depth)]
            position += scenario.depth
            if client is not None and client.closed_while_idle():
                stats.info(scenario, "idle_closed")
                client.close()
                client = None
            if client is None:
                try:
                    client = await Client.open(port)
                except Exception as error:  # noqa: BLE001 - counted by kind
                    stats.fail(scenario, failure_kind(error), f"connect: {type(error).__name__}: {error}", len(batch))
                    continue
            reusable = await exchange(client, batch, scenario, stats, etags)
            if not reusable or scenario.fresh:
                client.close()
                client = None
    finally:
        if client is not None:
            client.close()


async def snapshots(stats: Stats, path: str, deadline: float) -> None:
    while time.time() < deadline:
        await asyncio.sleep(SNAPSHOT_INTERVAL)
        write_json(path, stats.snapshot(finished=False))


async def run(ports_file: str, out_file: str) -> None:
    config = read_ports(ports_file)
    deadline = config["deadline"]
    stats = Stats(config["started_at"])
    etags: dict[str, str] = {}
    tasks = [
        connection_loop(scenario, config["ports"][scenario.server], deadline, stats, etags)
        for scenario in wellformed_scenarios()
        for _ in range(scenario.connections)
    ]
    reporter = asyncio.ensure_future(snapshots(stats, out_file, deadline))
    await asyncio.gather(*tasks)
    reporter.cancel()
    write_json(out_file, stats.snapshot(finished=True))


def main() -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(run(sys.argv[1], sys.argv[2]))
    else:
        uvloop.run(run(sys.argv[1], sys.argv[2]))


if __name__ == "__main__":
    main()
