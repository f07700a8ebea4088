"""Runs httpx's and requests' own test suites against rush and against their default servers.

    python tests/suites/runner.py [--suite httpx|requests] [--server rush|reference|both] [--subset]

Each suite's sources are the sdist of the installed version (sources.py, cached outside the
repository). A run is ``python -m pytest`` in that source tree, as its project runs it (its own
pytest settings), with:

* ``-p suite_outcomes``, which records every test's outcome;
* for rush, the plugin that puts rush in place of the default server (rush_httpx.py: uvicorn
  in a thread; rush_requests.py: pytest-httpbin's wsgiref server);
* ``--deselect`` for every test in expected.toml's ``[[deselect]]`` (tests that reach beyond
  this machine), each with its reason.

Then every test that did not pass must be listed in expected.toml's ``[[fails]]`` for that
server (``on``), with the reason, and every entry must still fail (else it is stale), unless it
says ``sometimes``. With ``--server both`` (the default) the two runs must also have collected
the same tests. The difference between the servers is then exactly the entries whose ``on`` names
only one of them. ``--subset`` runs the part of each suite that ``make test`` runs (SUBSET below),
against rush only. Exit status 1 when a check fails.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import sources  # noqa: E402

EXPECTED = tomllib.loads((HERE / "expected.toml").read_text())
SUITES = ("httpx", "requests")
SERVERS = ("reference", "rush")
FAILING = ("failed", "error", "xpassed")

# What `make test` runs (tests/test_suites.py): the tests of each suite that talk to the server
# fixture over real sockets, chosen to catch the classes of bugs issue 33 found with these suites:
# ASGI headers given as two-item lists (httpx's test app writes every header so; every test below
# that gets a response fails without them), a streamed request body the app answers without reading
# (test_stream_request, which lost the answer about one run in ten), request bodies in every shape
# (content, files, streams, chunked), redirects, cookies, timeouts, and WSGI over plain HTTP and TLS
# (requests against httpbin: uploads, HEAD, gzip, digest auth, cookies, redirects, a certificate
# verified against its CA). Node id prefixes, as pytest takes them on its command line.
SUBSET = {
    "httpx": [
        "tests/client/test_client.py",
        "tests/client/test_async_client.py",
        "tests/client/test_redirects.py",
        "tests/test_api.py",
        "tests/test_timeouts.py",
        "tests/test_multipart.py",
    ],
    # TestRequests: every test of requests' main class, about 280, most against httpbin; not
    # TestTimeout, whose /delay/10 requests hold the one worker for 10 s after the client gave up
    # (as they hold pytest-httpbin's single-threaded server).
    "requests": [
        "tests/test_requests.py::TestRequests",
    ],
}

PLUGINS = {
    "httpx": {"rush": ["-p", "rush_httpx"], "reference": []},
    # pytest-httpbin registers its fixtures as the plugin named "httpbin".
    "requests": {"rush": ["-p", "rush_requests", "-p", "no:httpbin"], "reference": []},
}


@dataclass
class Run:
    suite: str
    server: str
    outcomes: dict[str, dict[str, Any]]
    returncode: int
    output: str


def entries(table: str, suite: str) -> list[dict[str, Any]]:
    found = [entry for entry in EXPECTED.get(table, []) if entry["suite"] == suite]
    for entry in found:
        assert entry.get("test") and entry.get("reason"), f"expected.toml {table} entry without test or reason: {entry}"
    return found


def run_suite(suite: str, server: str, subset: bool = False) -> Run:
    """Runs one suite against one server; returns every test's outcome."""
    root = sources.suite_dir(suite)
    with tempfile.TemporaryDirectory(prefix=f"rush-suite-{suite}-") as scratch:
        outcomes_file = Path(scratch) / "outcomes.json"
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        env["RUSH_SUITE_OUTCOMES"] = str(outcomes_file)
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "suite_outcomes"]
        command += PLUGINS[suite][server]
        for entry in entries("deselect", suite):
            command += ["--deselect", entry["test"]]
        if suite == "httpx":
            # httpx marks its own tests that need the network.
            command += ["-m", "not network"]
        if subset:
            command += SUBSET[suite]
        done = subprocess.run(command, cwd=root, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if not outcomes_file.exists():
            raise RuntimeError(
                f"{suite} under {server}: pytest wrote no outcomes\n{done.stdout[-4000:]}{done.stderr[-4000:]}"
            )
        outcomes = json.loads(outcomes_file.read_text())
    return Run(suite, server, outcomes, done.returncode, done.stdout + done.stderr)


def expected_failures(suite: str, server: str) -> list[dict[str, Any]]:
    return [entry for entry in entries("fails", suite) if server in entry["on"]]


def check(run: Run) -> list[str]:
    """Every failure listed for its server, every listed failure (that ran) still failing."""
    problems = []
    listed = expected_failures(run.suite, run.server)
    for nodeid, result in sorted(run.outcomes.items()):
        covering = [entry for entry in listed if fnmatch.fnmatchcase(nodeid, entry["test"])]
        where = f"{run.suite} under {run.server}: {nodeid} {result['outcome']}"
        if result["outcome"] in FAILING:
            if not covering:
                problems.append(f"{where}, not in expected.toml:\n    {_indent(result['why'])}")
            for entry in covering:
                pattern = entry.get("message")
                if pattern and run.server in entry.get("message_on", entry["on"]):
                    if not re.search(pattern, result["why"]):
                        problems.append(
                            f"{where}, not as expected.toml says ({pattern}):\n    {_indent(result['why'])}"
                        )
        elif any("sometimes" not in entry for entry in covering):
            problems.append(f"{where}, but expected.toml says it fails (a stale entry?)")
    return problems


def _indent(text: str) -> str:
    return text.replace("\n", "\n    ")


def summary(run: Run) -> str:
    counts: dict[str, int] = {}
    for result in run.outcomes.values():
        counts[result["outcome"]] = counts.get(result["outcome"], 0) + 1
    return f"{run.suite} under {run.server}: " + ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=SUITES, action="append", help="default: both")
    parser.add_argument("--server", choices=(*SERVERS, "both"), default="both")
    parser.add_argument("--subset", action="store_true", help="the part `make test` runs, against rush only")
    args = parser.parse_args(argv)
    servers = ["rush"] if args.subset else SERVERS if args.server == "both" else [args.server]
    problems: list[str] = []
    for suite in args.suite or SUITES:
        runs = {server: run_suite(suite, server, args.subset) for server in servers}
        for run in runs.values():
            print(summary(run), flush=True)
            problems += check(run)
        if len(runs) == 2 and set(runs["rush"].outcomes) != set(runs["reference"].outcomes):
            only = set(runs["rush"].outcomes) ^ set(runs["reference"].outcomes)
            problems.append(f"{suite}: the two runs collected different tests: {sorted(only)[:20]}")
    for problem in problems:
        print("PROBLEM:", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
