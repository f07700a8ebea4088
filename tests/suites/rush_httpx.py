"""pytest plugin: httpx's own test suite with its ``server`` fixture served by rush.

Loaded with ``-p rush_httpx`` (tests/suites/ on PYTHONPATH) by tests/suites/runner.py when
the suite runs against rush. httpx's tests/conftest.py starts uvicorn in a thread: its
session-scoped ``server`` fixture builds a uvicorn ``Config(app=app, lifespan="off")``, wraps it in
its ``TestServer`` and yields from ``serve_in_thread(server)``. A plugin's fixture cannot override
a conftest's (pytest prefers the nearer definition), so this plugin replaces the one seam the
fixture calls instead: once httpx's conftest module is registered, its ``serve_in_thread`` becomes
a function that starts a real rush process serving that same ``app`` (``tests.conftest:app``,
imported by rush's worker from httpx's source tree) on a socket bound here, and yields an object
with the ``url`` the tests use. httpx's files are not changed.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import support_loader


class RushTestServer:
    """What httpx's tests read from their ``server`` fixture: ``url`` (an ``httpx.URL``)."""

    def __init__(self, url: Any, process: Any) -> None:
        self.url = url
        self.process = process


def serve_with_rush(server: Any) -> Iterator[RushTestServer]:
    import httpx

    conftest = sys.modules["tests.conftest"]
    # The fixture must still be serving the conftest's own app, as this plugin assumes.
    assert server.config.app is conftest.app, "httpx's server fixture serves another app than tests.conftest:app"
    assert server.config.lifespan == "off"
    support = support_loader.load()
    suite_root = Path(conftest.__file__).resolve().parent.parent
    logs = Path(tempfile.mkdtemp(prefix="rush-httpx-suite-"))
    env = support.clean_environment()
    # httpx's conftest empties these for the tests; the server must not see them either.
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSLKEYLOGFILE"):
        env.pop(name, None)
        env.pop(name.lower(), None)
    process = support.RushServer(
        app="tests.conftest:app",
        args=["--chdir", str(suite_root), "--lifespan", "off", "--workers", "1"],
        directory=logs,
        env=env,
    )
    process.start()
    try:
        yield RushTestServer(httpx.URL(f"http://127.0.0.1:{process.port}/"), process)
    finally:
        process.finish()
    # Kept when finish() raised: its message points at these logs.
    shutil.rmtree(logs, ignore_errors=True)


# Whether httpx's conftest was found and its seam replaced: a later httpx that renames it must stop
# the run, not let uvicorn serve the tests while the report says rush.
_patched: list[object] = []


@pytest.hookimpl
def pytest_plugin_registered(plugin: object, manager: pytest.PytestPluginManager) -> None:
    path = getattr(plugin, "__file__", None)
    if getattr(plugin, "__name__", None) == "tests.conftest" and path and hasattr(plugin, "serve_in_thread"):
        plugin.serve_in_thread = serve_with_rush  # type: ignore[attr-defined]
        _patched.append(plugin)


def pytest_collection_finish(session: pytest.Session) -> None:
    uses_server = any("server" in getattr(item, "fixturenames", ()) for item in session.items)
    if uses_server and not _patched:
        raise pytest.UsageError("rush_httpx: httpx's tests/conftest.py has no serve_in_thread to replace")


def pytest_report_header(config: pytest.Config) -> str:
    return f"httpx's server fixture: rush ({os.environ.get('RUSH_BINARY') or 'the development build'})"
