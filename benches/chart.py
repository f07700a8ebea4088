"""One PNG bar chart per scenario group, drawn from benches/results/latest.json with matplotlib.

Run with the bench virtualenv's Python, which has matplotlib (rush's own
.venv does not, and must not)::

    .venv-bench/bin/python -m benches.chart [benches/results/latest.json] [benches/charts]

One panel per scenario, one bar per server: the median requests/s, with a
line from the slowest to the fastest repeat; a server that failed gets no bar
but the word "failed", so a missing bar is never mistaken for zero. matplotlib is
imported inside `draw_group` so importing this module costs nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benches.report import CHARTS_DIR, LATEST_PATH, load_latest
from benches.scenarios import IDLE_LOADS

# One colour per server, stable across charts; rush first, in its own colour.
PALETTE = [
    "#d62728",
    "#1f77b4",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
    "#aec7e8",
    "#98df8a",
    "#c5b0d5",
    "#ffbb78",
    "#c49c94",
    "#f7b6d2",
]


def draw_group(name: str, group_data: dict, out_path: Path) -> Path:
    """Small multiples: one panel per scenario with its own scale (pipelined numbers are an order of
    magnitude above the others and would flatten a shared axis), one horizontal bar per server."""
    import matplotlib

    matplotlib.use("Agg")  # no display on a server
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    # Throughput only: the idle rows (websocket, http2) measure memory (they are in the table).
    scenarios = [scenario for scenario in group_data["scenarios"] if scenario.get("load") not in IDLE_LOADS]
    servers = list(group_data["servers"])
    colours = {server: PALETTE[index % len(PALETTE)] for index, server in enumerate(servers)}
    summaries = {(summary["scenario"], summary["server"]): summary for summary in group_data["summaries"]}
    # Each panel lists only the servers measured on its scenario (a group's scenarios may need
    # different apps, which not every server has), in the group's order.
    measured_servers = {
        f"{scenario['group']}/{scenario['name']}": [
            server for server in servers if (f"{scenario['group']}/{scenario['name']}", server) in summaries
        ]
        for scenario in scenarios
    }
    tallest = max((len(names) for names in measured_servers.values()), default=1)
    columns = min(4, len(scenarios))
    rows = -(-len(scenarios) // columns)
    figure, panels = plt.subplots(
        rows, columns, figsize=(max(3.6 * columns, 9.0), 0.5 + rows * (0.45 * tallest + 1.0)), dpi=110, squeeze=False
    )
    for panel in panels.flat[len(scenarios) :]:
        panel.set_visible(False)
    for panel, scenario in zip(panels.flat, scenarios, strict=False):
        key = f"{scenario['group']}/{scenario['name']}"
        panel_servers = measured_servers[key]
        measured = [summaries[(key, server)] for server in panel_servers]
        top = max((s["medians"]["requests_per_second"] for s in measured if s["ok"]), default=1.0)
        for row, (server, summary) in enumerate(zip(panel_servers, measured, strict=True)):
            if not summary["ok"]:
                panel.text(0, row, " failed", va="center", fontsize=8, color="#444444")
                continue
            rps = summary["medians"]["requests_per_second"]
            panel.barh(row, rps, color=colours[server], height=0.7)
            if summary.get("rps_min") is not None and summary["rps_min"] != summary["rps_max"]:
                panel.hlines(row, summary["rps_min"], summary["rps_max"], color="black", linewidth=0.8)
            panel.text(rps + top * 0.02, row, f"{rps:,.0f}", va="center", fontsize=7)
        panel.set_yticks(range(len(panel_servers)), panel_servers, fontsize=8)
        # The same bar height in every panel, however many servers it has.
        panel.set_ylim(tallest - 0.5, -0.5)
        panel.set_xlim(0, top * 1.35)
        panel.set_title(scenario["title"], fontsize=9)
        panel.tick_params(axis="x", labelsize=7)
        # Thousands as "k", but plain numbers for panels that stay below a few thousand (a 1 MiB
        # download on one stream), whose ticks would all read "0k".
        formatter = (lambda value, _: f"{value / 1000:,.0f}k") if top >= 5000 else (lambda value, _: f"{value:,.0f}")
        panel.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(formatter))
        panel.grid(axis="x", alpha=0.3)
    environment, settings = group_data["environment"], group_data["settings"]
    several_workers = any(scenario.get("workers", 1) > 1 for scenario in scenarios)
    generator = "ws-load" if name == "websocket" else "wrk"
    if any(scenario.get("load", "").startswith("h2load") for scenario in scenarios):
        generator = "h2load"
    if any(scenario.get("load", "").startswith("h3-") for scenario in scenarios):
        generator = "h3-load and h2load"
    placement = (
        f"workers share {generator}'s cores where noted"
        if several_workers
        else f"one worker on one core, {generator} on another"
    )
    figure.suptitle(
        f"{name}: {'messages' if name == 'websocket' else 'requests'}/s, {placement}; median of {settings['repeat']} x "
        f"{settings['duration_s']:g} s ({environment['cpu']}, {environment['date']})",
        fontsize=10,
    )
    figure.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out_path)
    plt.close(figure)
    return out_path


def main(argv: list[str]) -> int:
    latest_path = Path(argv[0]) if argv else LATEST_PATH
    charts_dir = Path(argv[1]) if len(argv) > 1 else CHARTS_DIR
    groups = argv[2:] or None
    for name, group_data in load_latest(latest_path).get("groups", {}).items():
        if groups is None or name in groups:
            print(f"chart: {draw_group(name, group_data, charts_dir / f'{name}.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
