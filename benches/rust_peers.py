"""The Rust peers (actix-web, hyper) and the WebSocket and HTTP/3 load generators (ws-load, h3-load):
building them, and telling which versions were built.

benches/rust/ is a small cargo project of its own (its Cargo.toml has its own
``[workspace]`` table, so rush's workspace neither builds nor lints it). The
suite builds it in release mode with ``cargo build --release --locked``, at
low priority, into benches/rust/target/; the binaries take
``--host H --port P --workers N``.

The framework versions are read from benches/rust/Cargo.lock, which pins what
is built::

    python -m benches.rust_peers version actix-web     # prints "actix-web 4.x.y"
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

from benches import BENCHES_DIR

RUST_DIR = BENCHES_DIR / "rust"
RUST_BIN_DIR = RUST_DIR / "target" / "release"
BINARIES = ("actix-hello", "hyper-hello", "ws-load", "h3-load")


def locked_version(crate: str, lock_text: str) -> str | None:
    """The version of ``crate`` in a Cargo.lock's text (the first one, should it be there twice)."""
    pattern = r'\[\[package\]\]\nname = "' + re.escape(crate) + r'"\nversion = "([^"]+)"'
    match = re.search(pattern, lock_text)
    return match.group(1) if match else None


def build_command() -> list[str]:
    # nice: the build is minutes of CPU on a machine that may be doing other work; --locked: the
    # versions measured are the ones in Cargo.lock, not whatever is newest today.
    return [
        "nice",
        "-n",
        "10",
        "cargo",
        "build",
        "--release",
        "--locked",
        "--manifest-path",
        str(RUST_DIR / "Cargo.toml"),
    ]


def build() -> tuple[bool, str]:
    """Builds the peers; returns (success, a note saying why not)."""
    if shutil.which("cargo") is None:
        return False, "cargo is not installed (a Rust toolchain is needed to build the Rust peers)"
    completed = subprocess.run(build_command(), capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        last_lines = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        return False, f"cargo build failed: {' | '.join(last_lines)}"[:300]
    missing = [name for name in BINARIES if not (RUST_BIN_DIR / name).exists()]
    if missing:
        return False, f"cargo build made no {', '.join(missing)}"
    return True, ""


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "version":
        version = locked_version(argv[1], (RUST_DIR / "Cargo.lock").read_text())
        if version is None:
            print(f"{argv[1]} is not in benches/rust/Cargo.lock", file=sys.stderr)
            return 1
        print(f"{argv[1]} {version}")
        return 0
    print("usage: python -m benches.rust_peers version CRATE", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
