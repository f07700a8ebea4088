"""Runs last in tests/differential/: every entry of deliberate.toml must still cover a difference
that the suite found in this session, or it is stale (rush or a reference changed) and would hide
a future regression. Checked only after a full, passing run of the differential suite (no -k, no
single file, no failure that stopped a comparison half-way)."""

from __future__ import annotations

from pathlib import Path

import harness
import pytest


def test_every_deliberate_difference_still_occurs(request: pytest.FixtureRequest) -> None:
    here = Path(__file__).resolve().parent
    modules = {path.name for path in here.glob("test_diff_*.py")}
    ran = {Path(str(item.path)).name for item in request.session.items}
    filtered = request.config.getoption("keyword") or request.config.getoption("markexpr")
    if not modules <= ran or filtered or request.session.testsfailed:
        pytest.skip("only a full, passing run of the differential suite says whether an entry is stale")
    stale = [
        entry["match"]
        for entry in harness.DELIBERATE
        if entry["match"] not in harness.MATCHED and "sometimes" not in entry
    ]
    assert not stale, f"deliberate.toml entries that matched no difference (delete them): {stale}"
