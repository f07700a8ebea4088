"""rush's tests/support.py for the plugins that serve another project's test
suite (rush_httpx.py, rush_requests.py): loaded from its file under the name
``rush_support``, since httpx's and requests' own test packages are both
called ``tests`` and would shadow rush's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

RUSH_TESTS = Path(__file__).resolve().parent.parent


def load() -> Any:
    """The ``support`` module of rush's tests, loaded once."""
    if "rush_support" in sys.modules:
        return sys.modules["rush_support"]
    spec = importlib.util.spec_from_file_location("rush_support", RUSH_TESTS / "support.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["rush_support"] = module
    spec.loader.exec_module(module)
    return module
