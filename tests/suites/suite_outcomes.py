"""pytest plugin: writes each test's outcome of a client's suite to a JSON file.

Loaded with ``-p suite_outcomes`` by tests/suites/runner.py in every run of httpx's or requests'
suite, under rush and under the reference server alike, so both runs are compared test by test
(node id to outcome) rather than by the totals pytest prints. The file is named by
``$RUSH_SUITE_OUTCOMES``. An outcome is one of passed, failed, error (setup or teardown failed),
skipped, xfailed, xpassed; the error lines of a failure (pytest's ``E`` lines) are kept to explain it.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

_outcomes: dict[str, dict[str, Any]] = {}


def _error_lines(report: pytest.TestReport) -> str:
    text = getattr(report, "longreprtext", "") or ""
    lines = [line[1:].strip() for line in text.splitlines() if line.startswith("E ")]
    if not lines and text.strip():
        lines = text.strip().splitlines()[-1:]
    return "\n".join(line for line in lines if line)[:2000]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _outcomes.setdefault(report.nodeid, {"outcome": "passed", "why": ""})
    if report.when == "call" and hasattr(report, "wasxfail"):
        entry["outcome"] = "xfailed" if report.skipped else "xpassed"
    elif report.skipped:
        if entry["outcome"] == "passed":
            entry["outcome"] = "skipped"
    elif report.failed:
        entry["outcome"] = "failed" if report.when == "call" else "error"
        entry["why"] = entry["why"] or _error_lines(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("RUSH_SUITE_OUTCOMES")
    if path:
        with open(path, "w") as out:
            json.dump(_outcomes, out, indent=0, sort_keys=True)
