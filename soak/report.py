"""Turning a soak run's raw record into verdicts and a printed report.

The criteria (each must hold for the run to pass):

* ``wellformed``: no failed well-formed request (every attempt counted, no retries);
* ``panics``: no "panicked at" or "internal error" in any server's log;
* ``deaths``: no "died" in any server's log (a worker that exited without being asked);
* ``stops``: every server stopped on SIGTERM, exit status 0, no worker left over;
* ``rss``, per server. A generation is the set of workers started by one
  SIGHUP (generation 0: the first workers); its *floor* at an age is the
  lowest RSS among its workers sampled at that age (within AGE_WINDOW). The
  floor, not the mean: a worker holding a hostile client's large response
  at that moment jumps by megabytes that it gives back later, while a leak
  lifts every worker. Three checks, each at most ``RSS_TOLERANCE``:
  - *same age across the run*: the median floor at ``RSS_AGE`` seconds of age
    of the last third of the generations (at least one) against that of the
    first third. A supervisor that grows (each worker is forked from it) or
    anything else a new worker inherits shows up here;
  - *within a worker's life*: the median over the generations of the growth
    of the floor from ``EARLY_AGE`` to ``RSS_AGE`` seconds of age. A worker
    lives only ``HUP_INTERVAL`` seconds, so a leak per request shows up
    here, not across generations;
  - *supervisor*: its RSS at the last sample against the first.
"""

from __future__ import annotations

import statistics
from typing import Any

from soak.plan import EARLY_AGE, GRACEFUL_TIMEOUT, RSS_AGE, RSS_TOLERANCE, SAMPLE_INTERVAL

# A worker's sample counts as "at age A" when taken within this of A.
AGE_WINDOW = SAMPLE_INTERVAL / 2 + 1.0
# Failures within this long after a server's SIGHUP count as "during a reload".
RELOAD_WINDOW = GRACEFUL_TIMEOUT + 5.0


def worker_series(samples: list[dict[str, Any]], server: str) -> dict[int, list[tuple[float, float, int]]]:
    """pid -> [(run time, age, rss_kb)] over the samples."""
    series: dict[int, list[tuple[float, float, int]]] = {}
    for sample in samples:
        for pid, worker in sample["servers"].get(server, {}).get("workers", {}).items():
            series.setdefault(int(pid), []).append((sample["t"], worker["age"], worker["rss_kb"]))
    return series


def rss_at_age(points: list[tuple[float, float, int]], age: float) -> int | None:
    near = [(abs(point_age - age), rss) for _, point_age, rss in points if abs(point_age - age) <= AGE_WINDOW]
    return min(near)[1] if near else None


def growth(before: float | None, after: float | None) -> float | None:
    if not before or after is None:
        return None
    return after / before - 1.0


def analyse_rss(samples: list[dict[str, Any]], server: str, generations: dict[int, int]) -> dict[str, Any]:
    series = worker_series(samples, server)
    by_generation: dict[int, list[int]] = {}
    for pid in series:
        by_generation.setdefault(generations.get(pid, -1), []).append(pid)
    rows = []
    for generation in sorted(by_generation):
        pids = sorted(by_generation[generation])
        early = [value for pid in pids if (value := rss_at_age(series[pid], EARLY_AGE)) is not None]
        late = [value for pid in pids if (value := rss_at_age(series[pid], RSS_AGE)) is not None]
        rows.append(
            {
                "generation": generation,
                "workers": pids,
                "first_seen_t": min(series[pid][0][0] for pid in pids),
                "rss_kb_early": early,
                "rss_kb_at_age": late,
                "floor_kb_early": min(early) if early else None,
                "floor_kb_at_age": min(late) if late else None,
                "rss_kb_peak": max(rss for pid in pids for _, _, rss in series[pid]),
                "within_life_growth": growth(min(early) if early else None, min(late) if late else None),
            }
        )
    measured = [row for row in rows if row["floor_kb_at_age"] is not None and row["generation"] >= 0]
    third = max(1, len(measured) // 3)
    first, last = measured[:third], measured[-third:]
    same_age = None
    if len(measured) >= 2:
        same_age = growth(
            statistics.median(row["floor_kb_at_age"] for row in first),
            statistics.median(row["floor_kb_at_age"] for row in last),
        )
    lives = [row["within_life_growth"] for row in rows if row["within_life_growth"] is not None]
    within_life = statistics.median(lives) if lives else None
    supervisor = [
        sample["servers"][server]["supervisor"]["rss_kb"]
        for sample in samples
        if sample["servers"].get(server, {}).get("supervisor")
    ]
    supervisor_growth = growth(supervisor[0], supervisor[-1]) if len(supervisor) >= 2 else None
    # The newest workers at the end, against generation 0 at the same age.
    last_sample = samples[-1]["servers"].get(server, {}).get("workers", {}) if samples else {}
    at_end = []
    for pid, worker in last_sample.items():
        earlier = [rss_at_age(series[p], worker["age"]) for p in by_generation.get(0, []) if p != int(pid)]
        earlier = [value for value in earlier if value is not None]
        at_end.append(
            {
                "pid": int(pid),
                "generation": generations.get(int(pid), -1),
                "age": worker["age"],
                "rss_kb": worker["rss_kb"],
                "generation0_rss_kb_same_age": min(earlier) if earlier else None,
            }
        )
    checks = {
        "same_age_growth": same_age,
        "within_life_growth": within_life,
        "supervisor_growth": supervisor_growth,
    }
    failed = [name for name, value in checks.items() if value is not None and value > RSS_TOLERANCE]
    return {
        "generations": rows,
        "compared_generations": [[row["generation"] for row in first], [row["generation"] for row in last]],
        **checks,
        "supervisor_rss_kb_first": supervisor[0] if supervisor else None,
        "supervisor_rss_kb_last": supervisor[-1] if supervisor else None,
        "newest_workers_at_end": at_end,
        "failed": failed,
    }


def failures_by_reload(timeline: dict[str, int], hups: list[float]) -> tuple[int, int]:
    """(failed attempts within RELOAD_WINDOW after a SIGHUP, the others)."""
    during = other = 0
    for second, count in timeline.items():
        t = int(second)
        if any(hup <= t + 1 and t < hup + RELOAD_WINDOW for hup in hups):
            during += count
        else:
            other += count
    return during, other


def analyse(run: dict[str, Any]) -> dict[str, Any]:
    wellformed = run["wellformed"] or {"scenarios": {}, "timeline": {}}
    servers: dict[str, Any] = {}
    for name, server in run["servers"].items():
        logs = server["log"]
        scenarios = {key: value for key, value in wellformed["scenarios"].items() if value["server"] == name}
        failed: dict[str, int] = {}
        for scenario in scenarios.values():
            for kind, count in scenario["failed"].items():
                failed[kind] = failed.get(kind, 0) + count
        during, other = failures_by_reload(wellformed["timeline"].get(name, {}), server["hups_t"])
        generations = {int(pid): generation for pid, generation in logs["generations"].items()}
        servers[name] = {
            "requests_ok": sum(scenario["ok"] for scenario in scenarios.values()),
            "requests_failed": sum(failed.values()),
            "failed_by_kind": failed,
            "failed_during_reloads": during,
            "failed_otherwise": other,
            "rss": analyse_rss(run["samples"], name, generations),
        }
    total_failed = sum(server["requests_failed"] for server in servers.values())
    criteria = {
        "wellformed": {
            "ok": total_failed == 0 and run["wellformed"] is not None,
            "detail": f"{total_failed} failed well-formed requests"
            + ("" if run["wellformed"] is not None else " (no result from the client process)"),
        },
        "panics": {
            "ok": not any(server["log"]["panics"] for server in run["servers"].values()),
            "detail": f"{sum(len(server['log']['panics']) for server in run['servers'].values())} panic lines",
        },
        "deaths": {
            "ok": not any(server["log"]["deaths"] for server in run["servers"].values()),
            "detail": f"{sum(len(server['log']['deaths']) for server in run['servers'].values())} worker deaths",
        },
        "stops": {
            "ok": all(server["exit_code"] == 0 and not server["stop_problem"] for server in run["servers"].values()),
            "detail": ", ".join(
                f"{name} exit {server['exit_code']}"
                + (f" ({server['stop_problem']})" if server["stop_problem"] else "")
                for name, server in run["servers"].items()
            ),
        },
        "rss": {
            "ok": not any(server["rss"]["failed"] for server in servers.values()),
            "detail": "; ".join(
                f"{name}: {', '.join(server['rss']['failed']) or 'flat'}" for name, server in servers.items()
            ),
        },
    }
    if run.get("aborted"):
        criteria["completed"] = {"ok": False, "detail": run["aborted"]}
    return {"servers": servers, "criteria": criteria, "passed": all(item["ok"] for item in criteria.values())}


# ---------------------------------------------------------------------------
# Rendering


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def mib(kb: int | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    cells = [[str(cell) for cell in row] for row in [headers, *rows]]
    widths = [max(len(row[index]) for row in cells) for index in range(len(headers))]
    lines = []
    for number, row in enumerate(cells):
        lines.append(
            "  ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(row, widths, strict=True))
            ).rstrip()
        )
        if number == 0:
            lines.append("  ".join("-" * width for width in widths))
    return lines


def render(run: dict[str, Any], analysis: dict[str, Any]) -> str:
    out = [
        f"rush soak {run['stamp']}: {run['minutes']:g} min planned, {run['elapsed_s'] / 60:.1f} min run, "
        f"{len(run['servers'])} servers x {run['workers']} workers, SIGHUP every {run['hup_interval']:g}s each, "
        f"rates x{run.get('rate_scale', 1):g}; "
        f"CPU of servers and clients: {run.get('cpu_s', 0):.0f}s ({run.get('cpu_s', 0) / run['elapsed_s']:.2f} cores)",
        "",
        "Well-formed requests",
    ]
    wellformed = run["wellformed"] or {"scenarios": {}}
    rows = []
    for name, scenario in sorted(wellformed["scenarios"].items()):
        failed = ", ".join(f"{kind} {count}" for kind, count in sorted(scenario["failed"].items())) or "-"
        info = ", ".join(f"{key} {count}" for key, count in sorted(scenario["info"].items())) or "-"
        rows.append([name, scenario["ok"], sum(scenario["failed"].values()), failed, info])
    out += table(["scenario", "ok", "failed", "failures by kind", "server closes (not failures)"], rows)
    out += ["", "Per server"]
    rows = []
    for name, server in analysis["servers"].items():
        log = run["servers"][name]["log"]
        rows.append(
            [
                name,
                server["requests_ok"],
                server["requests_failed"],
                f"{server['failed_during_reloads']}/{server['failed_otherwise']}",
                len(run["servers"][name]["hups_t"]),
                len(log["panics"]),
                len(log["deaths"]),
                log["errors"],
                run["servers"][name]["exit_code"],
            ]
        )
    out += table(["server", "ok", "failed", "in reload/else", "HUPs", "panics", "deaths", "ERROR lines", "exit"], rows)
    out += ["", f"Worker RSS (MiB) per generation at {EARLY_AGE:g}s and {RSS_AGE:g}s of age (floor: the lowest)"]
    rows = []
    for name, server in analysis["servers"].items():
        for row in server["rss"]["generations"]:
            rows.append(
                [
                    name,
                    row["generation"],
                    f"{row['first_seen_t']:.0f}s",
                    " ".join(str(pid) for pid in row["workers"]),
                    " ".join(mib(value) for value in row["rss_kb_early"]) or "-",
                    " ".join(mib(value) for value in row["rss_kb_at_age"]) or "-",
                    mib(row["rss_kb_peak"]),
                    percent(row["within_life_growth"]),
                ]
            )
    out += table(
        ["server", "gen", "seen at", "workers", f"@{EARLY_AGE:g}s", f"@{RSS_AGE:g}s", "peak", "floor growth"], rows
    )
    out += ["", "RSS criteria (limit +10%)"]
    rows = []
    for name, server in analysis["servers"].items():
        rss = server["rss"]
        rows.append(
            [
                name,
                "n/a (one generation)"
                if rss["same_age_growth"] is None
                else "gen {} vs {}: {}".format(
                    "+".join(map(str, rss["compared_generations"][1])),
                    "+".join(map(str, rss["compared_generations"][0])),
                    percent(rss["same_age_growth"]),
                ),
                percent(rss["within_life_growth"]),
                f"{mib(rss['supervisor_rss_kb_first'])} -> {mib(rss['supervisor_rss_kb_last'])} "
                f"({percent(rss['supervisor_growth'])})",
                "; ".join(
                    f"{worker['pid']} gen {worker['generation']} {worker['age']:.0f}s {mib(worker['rss_kb'])}"
                    f" (gen 0 floor {mib(worker['generation0_rss_kb_same_age'])})"
                    for worker in rss["newest_workers_at_end"]
                ),
            ]
        )
    out += table(["server", f"same age ({RSS_AGE:g}s)", "within life", "supervisor", "newest workers at end"], rows)
    out += ["", "Hostile clients (outcomes, not failures)"]
    rows = []
    hostile = (run["hostile"] or {}).get("outcomes", {})
    for name, scenarios in hostile.items():
        for scenario, outcomes in sorted(scenarios.items()):
            for outcome, count in sorted(outcomes.items(), key=lambda item: -item[1]):
                rows.append([name, scenario, count, outcome])
    out += table(["server", "client", "count", "outcome"], rows)
    events = (run["wellformed"] or {}).get("events", [])
    if events:
        out += ["", f"First failures ({min(len(events), 8)} of {len(events)} recorded)"]
        out += [
            f"  t={event['t']:.1f}s {event['scenario']}: {event['kind']} x{event['count']}: {event['detail']}"
            for event in events[:8]
        ]
    for name, server in run["servers"].items():
        for line in (server["log"]["panics"] + server["log"]["deaths"])[:5]:
            out.append(f"  {name} log: {line}")
    out += ["", "Criteria"]
    for name, item in analysis["criteria"].items():
        out.append(f"  {'PASS' if item['ok'] else 'FAIL'}  {name}: {item['detail']}")
    out.append(f"Soak {'PASSED' if analysis['passed'] else 'FAILED'}")
    return "\n".join(out)
