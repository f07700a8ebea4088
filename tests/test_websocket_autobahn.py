"""A quick subset of the Autobahn|Testsuite cases, through `kosoku` (it
drives Autobahn's own case files), against the raw ASGI echo app: framing,
pings and pongs, reserved bits and opcodes, fragmentation, UTF-8, the
closing handshake, and permessage-deflate negotiation. Every case must be
OK, or NON-STRICT / INFORMATIONAL as Autobahn's own reports allow.

The whole suite (517 cases, sections 1-13) is for a manual run, minutes
long: ``kosoku 127.0.0.1:PORT -o reports/`` against
``rush tests.apps.ws_apps:asgi_app --ws-max-size 64M``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from support import VENV_BIN, RushServer, ServerFactory

KOSOKU = VENV_BIN / "kosoku"
QUICK_CASES = ["1.*", "2.*", "3.*", "4.*", "5.*", "6.1.*", "6.4.*", "7.*", "10.*", "12.1.*", "13.1.*"]
ACCEPTED = {"OK", "NON-STRICT", "INFORMATIONAL"}


@pytest.mark.skipif(not KOSOKU.exists() and shutil.which("kosoku") is None, reason="kosoku is not installed")
def test_autobahn_quick_subset(rush_server: ServerFactory, tmp_path: Path) -> None:
    server: RushServer = rush_server("tests.apps.ws_apps:asgi_app", "--ws-max-size", "64M")
    command = [str(KOSOKU if KOSOKU.exists() else shutil.which("kosoku")), f"127.0.0.1:{server.port}"]
    for case in QUICK_CASES:
        command += ["-i", case]
    command += ["-p", "2", "-o", str(tmp_path / "reports")]
    finished = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    results = [json.loads(path.read_text()) for path in (tmp_path / "reports").glob("*case*.json")]
    assert len(results) > 100
    bad = [
        (result["id"], result["behavior"], result["behaviorClose"])
        for result in results
        if result["behavior"] not in ACCEPTED or result["behaviorClose"] not in ACCEPTED
    ]
    assert bad == []
