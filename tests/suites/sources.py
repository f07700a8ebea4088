"""The test sources of a client library (httpx, requests), for the version installed here.

The suites under tests/suites/ run a client's own tests against rush. Those tests belong to their
project and are never copied into this repository: `suite_dir` downloads the sdist of the installed
version from PyPI with pip (``--no-binary :all: --no-deps``, so only that one archive), unpacks it
into a cache directory (``$RUSH_SUITES_CACHE``, else ``~/.cache/rush/suites``) and reuses it from
then on. Both sdists ship their ``tests/`` directory.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("RUSH_SUITES_CACHE") or Path.home() / ".cache" / "rush" / "suites")


def suite_dir(project: str) -> Path:
    """The unpacked sdist of ``project`` at its installed version (downloaded once)."""
    version = importlib.metadata.version(project)
    target = CACHE / f"{project}-{version}"
    # The marker is written last, so an interrupted download is not taken for a complete one.
    if (target / ".unpacked").exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        only_the_sdist = ["--no-binary", ":all:", "--no-deps"]
        pip = [sys.executable, "-m", "pip", "download", "-q", *only_the_sdist]
        subprocess.run([*pip, "--dest", scratch, f"{project}=={version}"], check=True)
        (archive,) = Path(scratch).glob("*.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        (unpacked,) = (path for path in Path(scratch).iterdir() if path.is_dir())
        if not (unpacked / "tests").is_dir():
            raise RuntimeError(f"the sdist of {project} {version} has no tests/ directory")
        shutil.rmtree(target, ignore_errors=True)
        unpacked.rename(target)
    (target / ".unpacked").touch()
    return target


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(suite_dir(name))
