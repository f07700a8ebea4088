"""The tables in benches/README.md, regenerated from measured results.

The README is written by hand except between marker pairs::

    <!-- results:hello -->  ...generated...  <!-- /results:hello -->

`replace_section` swaps what is between one pair and leaves every other byte
of the file alone (a missing pair is appended at the end). There is one
section per scenario group (chart, table, environment, exact commands) and a
``headline`` section: rush against the best peer of each scenario, as ratios,
ready for the top-level README to embed.

The sections are rendered from benches/results/latest.json, which keeps, per
group, the summaries of the last complete measurement of that group (so a
run of one group does not erase the tables of the others). Rendering is pure
(dicts in, markdown out) so it is tested without measuring anything.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from benches import BENCHES_DIR
from benches.scenarios import HEADLINE_EXCLUDED_GROUPS, IDLE_LOADS

README_PATH = BENCHES_DIR / "README.md"
LATEST_PATH = BENCHES_DIR / "results" / "latest.json"
CHARTS_DIR = BENCHES_DIR / "charts"
# wrk's CPU time over the run's wall time at or above which the load generator was the bottleneck.
CLIENT_SATURATED = 0.95
NOT_MEASURED = "_Not yet measured. Run `make bench` on a quiet machine to fill this in._"


def start_marker(name: str) -> str:
    return f"<!-- results:{name} -->"


def end_marker(name: str) -> str:
    return f"<!-- /results:{name} -->"


def replace_section(text: str, name: str, content: str) -> str:
    """``text`` with what lies between the ``name`` markers replaced by ``content`` (markers kept).

    Everything outside the markers is returned byte for byte. When the markers are absent, the
    section is appended at the end. A start marker without its end marker is an error, never a
    guess (guessing could swallow hand-written text)."""
    start, end = start_marker(name), end_marker(name)
    block = f"{start}\n{content.strip()}\n{end}"
    start_at = text.find(start)
    if start_at < 0:
        if end in text:
            raise ValueError(f"{end} without {start}")
        separator = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        return f"{text}{separator}{block}\n"
    end_at = text.find(end, start_at)
    if end_at < 0:
        raise ValueError(f"{start} without {end}")
    return text[:start_at] + block + text[end_at + len(end) :]


def section_names(text: str) -> list[str]:
    return re.findall(r"<!-- results:([\w.-]+) -->", text)


# --- number formatting -------------------------------------------------------------------------


def format_rps(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


def format_ms(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f} ms" if value < 1 else f"{value:.2f} ms"


def format_us(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} µs"


def format_mb(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e6:.1f} MB"


def format_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def escape_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --- the latest measurement of each group -------------------------------------------------------


def load_latest(path: Path = LATEST_PATH) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"groups": {}}


def merge_into_latest(latest: dict, document: dict, groups: list[str], results_file: str) -> dict:
    """``latest`` with the given groups replaced by their part of ``document`` (a results file)."""
    merged = {"groups": dict(latest.get("groups", {}))}
    for group in groups:
        scenarios = [scenario for scenario in document["scenarios"] if scenario["group"] == group]
        keys = {f"{group}/{scenario['name']}" for scenario in scenarios}
        summaries = [summary for summary in document["summaries"] if summary["scenario"] in keys]
        measured = {summary["server"] for summary in summaries}
        apps = {scenario.get("app", "hello") for scenario in scenarios}
        merged["groups"][group] = {
            "results_file": results_file,
            "environment": document["environment"],
            "settings": document["settings"],
            # Only the servers of this group, with only the commands its scenarios used.
            "servers": {
                name: {**server, "commands": _commands_for(server, apps)}
                for name, server in document["servers"].items()
                if name in measured
            },
            "skipped": document.get("skipped", {}),
            "scenarios": scenarios,
            "wrk_commands": {key: command for key, command in document.get("wrk_commands", {}).items() if key in keys},
            "summaries": summaries,
        }
    return merged


def _commands_for(server: dict, apps: set[str]) -> dict[str, str]:
    """The server's commands (keyed ``app`` or ``app, N workers``) for the given apps."""
    commands = server.get("commands", {})
    return {label: command for label, command in commands.items() if label.split(",")[0] in apps}


# --- rendering -----------------------------------------------------------------------------------


def _summaries_by_scenario(group_data: dict) -> dict[str, dict[str, dict]]:
    table: dict[str, dict[str, dict]] = {}
    for summary in group_data["summaries"]:
        table.setdefault(summary["scenario"], {})[summary["server"]] = summary
    return table


def _rps(summary: dict | None) -> float | None:
    if not summary or not summary.get("ok"):
        return None
    return summary["medians"].get("requests_per_second")


def _client_bound(summary: dict) -> bool:
    return bool(summary.get("ok")) and (summary["medians"].get("client_cpu_utilisation") or 0) >= CLIENT_SATURATED


def environment_line(group_data: dict) -> str:
    environment, settings = group_data["environment"], group_data["settings"]
    websocket = any(_is_websocket(scenario) for scenario in group_data["scenarios"])
    generator = "the load generator (benches/rust's ws-load)" if websocket else "wrk"
    if any(_is_h2load(scenario) for scenario in group_data["scenarios"]):
        generator = "h2load"
    http3 = any(_is_h3load(scenario) for scenario in group_data["scenarios"])
    if http3:
        generator = "the load generators (benches/rust's h3-load, h2load)"
    servers = environment.get("servers", {})
    versions = [f"{servers.get('rush', 'rush')} (git {environment.get('rush_git') or '?'})"]
    versions += sorted({version for name, version in servers.items() if name != "rush"})
    if http3:
        versions.append(environment.get("h3_load") or "h3-load ?")
    if generator != "wrk" and not websocket:
        versions.append(environment.get("h2load") or "h2load ?")
    else:
        versions.append(environment.get("wrk") or "wrk ?")
    pythons = sorted(set(environment.get("python", {}).values()))
    return (
        f"Measured {environment['date']} on {environment['cpu']} ({environment['cpu_count']} CPUs), "
        f"{environment['kernel']}, Python {', '.join(pythons) or environment.get('runner_python')}; "
        f"{'; '.join(versions)}. "
        f"Server pinned to CPU {settings['server_cpu']}, {generator} to CPU {settings['client_cpu']}; "
        f"each number is the median of {settings['repeat']} run{'s' if settings['repeat'] != 1 else ''} "
        f"of {settings['duration_s']:g} s "
        f"after a {settings['warmup_s']:g} s warm-up. "
        f"Raw data: `{group_data['results_file']}`."
    )


HTTP_TABLE_HEAD = (
    "| scenario | server | requests/s | vs rush | p50 | p90 | p99 | server CPU / request | peak RSS | idle RSS |"
)


def render_group(name: str, group_data: dict | None, chart_exists: bool = True) -> str:
    """The generated part of a group's section: chart, table, environment, exact commands."""
    if not group_data:
        return NOT_MEASURED
    lines = []
    if chart_exists:
        lines += [f"![{name}: requests per second by scenario and server](charts/{name}.png)", ""]
    lines += [environment_line(group_data), ""]
    multi_worker = [scenario for scenario in group_data["scenarios"] if scenario.get("workers", 1) > 1]
    if multi_worker:
        settings = group_data["settings"]
        cores = ",".join(str(cpu) for cpu in sorted({settings["server_cpu"], settings["client_cpu"]}))
        lines += [
            f"Scenarios with several workers cannot pin the server to one core: it runs on CPUs {cores}, "
            f"sharing CPU {settings['client_cpu']} with wrk, so those rows measure server and load "
            "generator competing for the same cores.",
            "",
        ]
    by_scenario = _summaries_by_scenario(group_data)
    any_client_bound = False
    generator = "wrk's"
    if any(_is_websocket(scenario) for scenario in group_data["scenarios"]):
        generator = "ws-load's"
        table, any_client_bound = websocket_table(group_data)
        lines += table
    else:
        if any(_is_h2load(scenario) for scenario in group_data["scenarios"]):
            generator = "h2load's"
        if any(_is_h3load(scenario) for scenario in group_data["scenarios"]):
            generator = "h3-load's or h2load's"
        lines += [HTTP_TABLE_HEAD, "| --- | --- | --: | --: | --: | --: | --: | --: | --: | --: |"]
    for scenario in group_data["scenarios"]:
        if _is_websocket(scenario) or scenario.get("load") in IDLE_LOADS:
            continue
        key = f"{scenario['group']}/{scenario['name']}"
        servers = by_scenario.get(key, {})
        rush_rps = _rps(servers.get("rush"))
        for server_name, summary in servers.items():
            title = escape_cell(scenario["title"])
            if not summary["ok"]:
                reason = escape_cell("; ".join(summary["failures"])[:160])
                lines.append(f"| {title} | {server_name} | failed: {reason} | — | — | — | — | — | — | — |")
                continue
            medians = summary["medians"]
            rps = medians.get("requests_per_second")
            ratio = rps / rush_rps if rush_rps and rps is not None else None
            client_bound = _client_bound(summary)
            any_client_bound |= client_bound
            mark = " †" if client_bound else ""
            lines.append(
                f"| {title} | {server_name} | {format_rps(rps)}{mark} | {format_ratio(ratio)} | "
                f"{format_ms(medians.get('p50_ms'))} | {format_ms(medians.get('p90_ms'))} | "
                f"{format_ms(medians.get('p99_ms'))} | {format_us(medians.get('cpu_us_per_request'))} | "
                f"{format_mb(medians.get('peak_rss_bytes'))} | {format_mb(medians.get('idle_rss_bytes'))} |"
            )
    if any_client_bound:
        lines += [
            "",
            f"† {generator} core was at least {CLIENT_SATURATED:.0%} busy: the load generator, not the server, "
            "set this number, which is a lower bound of what the server can do.",
        ]
    for pairing in PROTOCOL_PAIRS:
        ratios = protocol_ratio_table(group_data, *pairing)
        if ratios:
            lines += ["", *ratios]
    if any(scenario.get("load") in ("h2-idle", "h3-idle") for scenario in group_data["scenarios"]):
        lines += ["", *idle_table(group_data)]
    if any(scenario.get("pipeline", 1) > 1 for scenario in group_data["scenarios"]):
        lines += ["", "Pipelined scenarios show no latency: wrk's percentiles are not valid under pipelining."]
    skipped = group_data.get("skipped") or {}
    if skipped:
        lines += ["", "Not measured: " + "; ".join(f"{name} ({reason})" for name, reason in skipped.items()) + "."]
    lines += ["", "<details><summary>Exact commands</summary>", ""]
    settings = group_data["settings"]
    pinning = f"`taskset -c {settings['server_cpu']}`"
    if multi_worker:
        cores = ",".join(str(cpu) for cpu in sorted({settings["server_cpu"], settings["client_cpu"]}))
        pinning += f" (`taskset -c {cores}` with several workers)"
    lines.append(f"Servers, each started with {pinning} and a free PORT:")
    lines.append("")
    for server_name, server in group_data["servers"].items():
        commands = server.get("commands") or {"": server.get("command", "?")}
        for label, command in commands.items():
            # The app is named only where one server starts in several ways within the group.
            shown = f" [{label}]" if len(commands) > 1 else ""
            lines.append(f"- {server_name}{shown} ({server.get('version', '?')}): `{command}`")
    lines += ["", f"Load, each run with `taskset -c {settings['client_cpu']}`:", ""]
    for scenario in group_data["scenarios"]:
        key = f"{scenario['group']}/{scenario['name']}"
        command = group_data.get("wrk_commands", {}).get(key, "?")
        lines.append(f"- {escape_cell(scenario['title'])}: `{command}`")
    lines += ["", "</details>"]
    return "\n".join(lines)


def _is_websocket(scenario: dict) -> bool:
    return scenario.get("load") in ("websocket", "ws-idle")


def _is_h2load(scenario: dict) -> bool:
    return scenario.get("load") in ("h2load", "h2load-h1", "h2-idle")


def _is_h3load(scenario: dict) -> bool:
    return scenario.get("load") in ("h3-load", "h3-handshakes", "h3-idle")


# (the load of a scenario, the suffix of its twin's name, the two protocols' names, the title's
# prefix): the http2 group's h2c rows against their HTTP/1.1 twins (issue 24's targets: CPU at
# most 1.2x, a 1 MiB download's throughput within 10%), and the http3 group's HTTP/3 rows
# against their HTTP/2 twins (issue 35's: CPU at most 2x, a 1 MiB download at least 0.7x) and
# their HTTP/1.1 twins.
PROTOCOL_PAIRS = (
    ("h2load", "-h1", "h2c", "HTTP/1.1", "h2c: "),
    ("h3-load", "-h2", "HTTP/3", "HTTP/2", "HTTP/3: "),
    ("h3-load", "-h1", "HTTP/3", "HTTP/1.1", "HTTP/3: "),
)


def protocol_ratio_table(
    group_data: dict, load: str, suffix: str, protocol: str, twin_protocol: str, prefix: str
) -> list[str]:
    """For each scenario of ``load`` with a twin (``NAME`` and ``NAME`` + ``suffix``) and each server
    measured on both: ``protocol`` over ``twin_protocol``, for requests per second and for server
    CPU per request. Empty when the group has no such pair."""
    by_scenario = _summaries_by_scenario(group_data)
    scenarios = {scenario["name"]: scenario for scenario in group_data["scenarios"]}
    rows = []
    for name, scenario in scenarios.items():
        twin = scenarios.get(f"{name}{suffix}")
        if twin is None or scenario.get("load") != load:
            continue
        h2 = by_scenario.get(f"{scenario['group']}/{name}", {})
        h1 = by_scenario.get(f"{twin['group']}/{twin['name']}", {})
        for server_name in [server for server in h2 if server in h1]:
            if not (h2[server_name].get("ok") and h1[server_name].get("ok")):
                continue
            h2_medians, h1_medians = h2[server_name]["medians"], h1[server_name]["medians"]
            rps = _ratio(h2_medians.get("requests_per_second"), h1_medians.get("requests_per_second"))
            cpu = _ratio(h2_medians.get("cpu_us_per_request"), h1_medians.get("cpu_us_per_request"))
            title = escape_cell(scenario["title"].removeprefix(prefix))
            rows.append(f"| {title} | {server_name} | {format_ratio(rps)} | {format_ratio(cpu)} |")
    if not rows:
        return []
    same = "the same h2load" if load == "h2load" else "h3-load and h2load"
    return [
        f"{protocol} against {twin_protocol} (each pair of rows above, {same}):",
        "",
        f"| scenario | server | requests/s, {protocol} ÷ {twin_protocol} | "
        f"server CPU / request, {protocol} ÷ {twin_protocol} |",
        "| --- | --- | --: | --: |",
        *rows,
    ]


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def idle_table(group_data: dict) -> list[str]:
    """The http2 and http3 groups' memory rows (loads "h2-idle", "h3-idle"): the RSS the server
    grew by per idle connection, and its CPU per connection opened (handshake, SETTINGS, one
    request)."""
    lines = [
        "| scenario | server | RSS / idle connection | server CPU / connection | peak RSS |",
        "| --- | --- | --: | --: | --: |",
    ]
    by_scenario = _summaries_by_scenario(group_data)
    for scenario in group_data["scenarios"]:
        if scenario.get("load") not in ("h2-idle", "h3-idle"):
            continue
        title = escape_cell(scenario["title"])
        for server_name, summary in by_scenario.get(f"{scenario['group']}/{scenario['name']}", {}).items():
            if not summary["ok"]:
                reason = escape_cell("; ".join(summary["failures"])[:160])
                lines.append(f"| {title} | {server_name} | failed: {reason} | — | — |")
                continue
            medians = summary["medians"]
            lines.append(
                f"| {title} | {server_name} | {format_kib(medians.get('rss_per_connection_bytes'))} | "
                f"{format_us(medians.get('cpu_us_per_request'))} | {format_mb(medians.get('peak_rss_bytes'))} |"
            )
    return lines


def format_kib(value: float | None) -> str:
    return "—" if value is None else f"{value / 1024:.2f} KiB"


def websocket_table(group_data: dict) -> tuple[list[str], bool]:
    """The websocket group's table: messages per second (deliveries, for a broadcast) and server
    CPU per message for the load scenarios; RSS per idle connection for the idle ones."""
    lines = [
        "| scenario | server | messages/s | vs rush | p50 | p99 | server CPU / message | peak RSS "
        "| RSS / idle connection |",
        "| --- | --- | --: | --: | --: | --: | --: | --: | --: |",
    ]
    by_scenario = _summaries_by_scenario(group_data)
    any_client_bound = False
    for scenario in group_data["scenarios"]:
        key = f"{scenario['group']}/{scenario['name']}"
        servers = by_scenario.get(key, {})
        rush_rps = _rps(servers.get("rush"))
        idle = scenario.get("load") == "ws-idle"
        for server_name, summary in servers.items():
            title = escape_cell(scenario["title"])
            if not summary["ok"]:
                reason = escape_cell("; ".join(summary["failures"])[:160])
                lines.append(f"| {title} | {server_name} | failed: {reason} | — | — | — | — | — | — |")
                continue
            medians = summary["medians"]
            if idle:
                cpu = format_us(medians.get("cpu_us_per_request"))
                per_connection = format_kib(medians.get("rss_per_connection_bytes"))
                lines.append(
                    f"| {title} | {server_name} | — | — | — | — | {cpu} ‡ "
                    f"| {format_mb(medians.get('peak_rss_bytes'))} | {per_connection} |"
                )
                continue
            rps = medians.get("requests_per_second")
            ratio = rps / rush_rps if rush_rps and rps is not None else None
            client_bound = _client_bound(summary)
            any_client_bound |= client_bound
            mark = " †" if client_bound else ""
            lines.append(
                f"| {title} | {server_name} | {format_rps(rps)}{mark} | {format_ratio(ratio)} | "
                f"{format_ms(medians.get('p50_ms'))} | {format_ms(medians.get('p99_ms'))} | "
                f"{format_us(medians.get('cpu_us_per_request'))} | {format_mb(medians.get('peak_rss_bytes'))} | — |"
            )
    lines += [
        "",
        "Broadcast rows count deliveries (a message reaching one member); their latency is from the send "
        "until the last member has it. ‡ Idle rows: server CPU per connection opened (handshake and one echo).",
    ]
    return lines, any_client_bound


def headline_rows(latest: dict) -> list[dict]:
    """Per scenario of every group: rush's rps, the best peer's, and their ratio."""
    rows = []
    for group_name, group_data in latest.get("groups", {}).items():
        if group_name in HEADLINE_EXCLUDED_GROUPS:
            continue
        by_scenario = _summaries_by_scenario(group_data)
        for scenario in group_data["scenarios"]:
            servers = by_scenario.get(f"{scenario['group']}/{scenario['name']}", {})
            # Memory rows have no throughput to compare, and rows meant for rush alone (the http3
            # group's App, static and HTTP/1.1 rows, for its own ratios between protocols) no peer.
            rush_alone = list(scenario.get("servers") or ()) == ["rush"]
            if "rush" not in servers or scenario.get("load") in IDLE_LOADS or rush_alone:
                continue
            rush_summary = servers["rush"]
            peers = {name: _rps(summary) for name, summary in servers.items() if name != "rush"}
            measured_peers = {name: rps for name, rps in peers.items() if rps is not None}
            best = max(measured_peers, key=measured_peers.__getitem__) if measured_peers else None
            rush_rps = _rps(rush_summary)
            rows.append(
                {
                    "scenario": f"{scenario['group']}: {scenario['title']}",
                    "rush_rps": rush_rps,
                    "client_bound": _client_bound(rush_summary) or (best is not None and _client_bound(servers[best])),
                    "rush_failed": not rush_summary.get("ok"),
                    "best_peer": best,
                    "best_peer_rps": measured_peers.get(best) if best else None,
                    "ratio": rush_rps / measured_peers[best] if best and rush_rps else None,
                }
            )
    return rows


def render_headline(latest: dict) -> str:
    rows = headline_rows(latest)
    if not rows:
        return NOT_MEASURED
    lines = [
        "| scenario | rush requests/s | best peer | its requests/s | rush ÷ best peer |",
        "| --- | --: | --- | --: | --: |",
    ]
    for row in rows:
        rush = "failed" if row["rush_failed"] else format_rps(row["rush_rps"])
        mark = " †" if row["client_bound"] else ""
        lines.append(
            f"| {escape_cell(row['scenario'])}{mark} | {rush} | {row['best_peer'] or '—'} | "
            f"{format_rps(row['best_peer_rps'])} | {format_ratio(row['ratio'])} |"
        )
    dates = sorted({group["environment"]["date"] for group in latest["groups"].values()})
    lines += [
        "",
        f"One worker on one core each (unless the scenario says workers); medians; measured {', '.join(dates)}. "
        "Details below.",
    ]
    if any(row["client_bound"] for row in rows):
        lines.append("† the load generator's core was saturated: the ratio is a lower bound, not a measurement.")
    return "\n".join(lines)


def render_readme(text: str, latest: dict, group_names: list[str], charts_dir: Path = CHARTS_DIR) -> str:
    """``text`` (the README) with the headline and every group's section regenerated."""
    text = replace_section(text, "headline", render_headline(latest))
    for name in group_names:
        group_data = latest.get("groups", {}).get(name)
        text = replace_section(text, name, render_group(name, group_data, (charts_dir / f"{name}.png").exists()))
    return text


def update_readme(latest: dict, group_names: list[str], readme_path: Path = README_PATH) -> None:
    text = readme_path.read_text() if readme_path.exists() else ""
    readme_path.write_text(render_readme(text, latest, group_names, readme_path.parent / "charts"))
