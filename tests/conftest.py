"""Fixtures for rush's integration tests (helpers live in support.py).

* ``rush_server``: a factory starting real rush processes for one test,
  ``rush_server("basic", "--max-body-size", "100")``; every server it started
  is stopped at teardown, and the test fails if one crashed or panicked.
* ``basic_server`` / ``async_server``: one shared server per test module for
  the many tests that need no special flags.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from support import RUSH, RushServer, ServerFactory


def pytest_configure(config: pytest.Config) -> None:
    if not RUSH.exists():
        raise pytest.UsageError(f"{RUSH} is missing: run `make build` first")


@pytest.fixture
def rush_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path_factory.mktemp("rush"))
    yield factory
    factory.finish_all()


@pytest.fixture(scope="module")
def module_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerFactory]:
    factory = ServerFactory(tmp_path_factory.mktemp("rush-shared"))
    yield factory
    factory.finish_all()


@pytest.fixture(scope="module")
def basic_server(module_servers: ServerFactory) -> RushServer:
    """tests/apps/basic.py with default settings, shared by a test module."""
    return module_servers("basic")


@pytest.fixture(scope="module")
def async_server(module_servers: ServerFactory) -> RushServer:
    """tests/apps/async_app.py (served on asyncio), shared by a test module."""
    return module_servers("async_app")
