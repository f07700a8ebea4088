"""The mechanics of benches/reliability.py (the reliability scenarios side by side with the peers).

Its quick mode runs every scenario against rush with tiny counts; this test
checks that each one ran and produced a row of the table for rush, with the
counts a row is made of. It asserts nothing about timings or failure counts:
the full run, with the peers, is what the README's table comes from.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(180)
def test_quick_mode_gives_every_scenario_a_row_for_rush(tmp_path: Path) -> None:
    results_file = tmp_path / "results.json"
    completed = subprocess.run(
        [
            *(sys.executable, "-m", "benches.reliability", "--quick", "--servers", "rush"),
            *("--json", str(results_file), "--logs", str(tmp_path / "logs")),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    rush = json.loads(results_file.read_text())["results"]["rush"]
    assert set(rush) == {"slowloris", "idle", "kill", "hups-term", "race-hup", "h2-rapid-reset"}
    for key, result in rush.items():
        assert not result.get("error"), f"{key}: {result['cell']}"

    assert len(rush["slowloris"]["cut_seconds"]) == rush["slowloris"]["drippers"] > 0
    assert rush["slowloris"]["fresh"]
    assert rush["idle"]["connections"] > 0 and rush["idle"]["rss_bytes"] > 0
    assert 0 <= rush["idle"]["held"] <= rush["idle"]["connections"]
    for key in ("kill", "hups-term", "race-hup"):
        assert rush[key]["answered"] + rush[key]["failed"] > 0, key
    assert rush["kill"]["after"] and rush["hups-term"]["exit"] and rush["race-hup"]["reload"]
    flood = rush["h2-rapid-reset"]
    assert min(flood["requests"]) > 0 and flood["p99_quiet_seconds"] > 0 and flood["p99_flood_seconds"] > 0
    assert sum(flood["flood_endings"].values()) > 0

    # The printed table: a header naming rush, and one row per scenario.
    rows = [line for line in completed.stdout.splitlines() if line.startswith("| ")]
    assert rows[0] == "| scenario | rush |"
    assert len(rows) == 2 + len(rush)
    for row, result in zip(rows[2:], rush.values(), strict=True):
        assert row.endswith(f"| {result['cell']} |")
