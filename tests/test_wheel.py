"""The release wheel installs and serves without Rust: the x86_64 manylinux
wheel ``make wheel`` built (or the one ``RUSH_WHEEL`` names) goes into a fresh
venv, with no index and nothing to build, under a PATH that has no cargo or
rustc, and a few integration test files run against the ``rush`` it installed
(``RUSH_BINARY``, read by tests/support.py).

Slow (a venv, then whole test files), so it runs only with ``RUSH_WHEEL_TEST=1``
(``make wheel-test``); ``make test`` skips it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest
from support import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("RUSH_WHEEL_TEST") != "1", reason="slow: set RUSH_WHEEL_TEST=1 (make wheel-test)"
    ),
]

# The test files run against the installed wheel: several binds, TLS, signals and processes.
TEST_FILES = ["tests/test_binds.py", "tests/test_tls.py", "tests/test_supervisor.py"]
# What a PATH may hold: the system's directories, never ~/.cargo/bin.
SYSTEM_PATH = ["/usr/local/bin", "/usr/bin", "/bin"]


def find_wheel() -> Path:
    """The wheel for this interpreter's CPython version on x86_64."""
    if os.environ.get("RUSH_WHEEL"):
        return Path(os.environ["RUSH_WHEEL"])
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    found = sorted((REPO / "target" / "wheels" / "release").glob(f"rush_server-*-{tag}-{tag}-manylinux*x86_64*.whl"))
    if not found:
        pytest.fail(f"no {tag} x86_64 manylinux wheel in target/wheels/release: run `make wheel` first")
    return found[-1]


def test_the_wheel_serves_without_a_rust_toolchain(tmp_path: Path) -> None:
    wheel = find_wheel()
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    binaries = environment / "bin"
    path = os.pathsep.join([str(binaries), *SYSTEM_PATH])
    assert shutil.which("cargo", path=path) is None and shutil.which("rustc", path=path) is None
    clean = {"PATH": path, "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    subprocess.run(
        [binaries / "python", "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)],
        env=clean,
        check=True,
        timeout=300,
    )
    # The extension imported is the wheel's, not the development build.
    location = subprocess.run(
        [binaries / "python", "-c", "import rush._rush; print(rush._rush.__file__)"],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    assert location.startswith(str(environment)), location
    assert sysconfig.get_config_var("EXT_SUFFIX") in location
    # The test files run with this checkout's pytest, against the wheel's rush.
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TEST_FILES],
        cwd=REPO,
        env={**os.environ, "PATH": path, "RUSH_BINARY": str(binaries / "rush"), "RUSH_WHEEL_TEST": "0"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and " failed" not in result.stdout
