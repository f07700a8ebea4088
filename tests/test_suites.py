"""Part of httpx's and requests' own test suites, run against rush (issue 33).

The whole suites, against rush and against their default servers side by side, are
`make test-suites` (tests/suites/runner.py). `make test` runs this part of them against rush only:
the tests of runner.SUBSET, which talk to a real rush process over real sockets (httpx's ASGI
test app; httpbin, a Flask app, over WSGI, plain and TLS). Every test that fails must be one that
tests/suites/expected.toml lists as failing under rush, with its reason. The suites' sources are
the sdists of the installed httpx and requests, downloaded once into a cache (tests/suites/sources.py).
"""

from __future__ import annotations

import pytest
from suites import runner


@pytest.mark.parametrize("suite", runner.SUITES)
def test_client_suite_subset_passes_against_rush(suite: str) -> None:
    run = runner.run_suite(suite, "rush", subset=True)
    problems = runner.check(run)
    assert not problems, "\n".join(problems) + f"\n--- pytest output ---\n{run.output[-6000:]}"
    # The subset really ran: every node id prefix of it matched tests that passed.
    for prefix in runner.SUBSET[suite]:
        matched = [nodeid for nodeid in run.outcomes if nodeid.startswith(prefix)]
        assert matched, f"{suite}: no test of the subset matches {prefix}\n{run.output[-3000:]}"
        assert any(run.outcomes[nodeid]["outcome"] == "passed" for nodeid in matched), (prefix, run.outcomes)
