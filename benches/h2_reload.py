"""Reloads under HTTP/2 load, rush beside nginx (issue 32): the same h2load
run against each, with two reloads while it runs.

    python -m benches.h2_reload [--seconds 8] [--connections 8] [--streams 10] [--repeats 3]

Each server serves a hello answer over h2c on loopback, on core 0 (``taskset
-c 0``); h2load runs on core 1 (``-c8 -m10`` by default, for ``--seconds``)
and the server is reloaded twice, at a third and at two thirds of the run:

- rush: ``rush benches.apps.rush_app:app --http auto --workers 2``, reloaded
  with SIGHUP to its supervisor (new workers start, the old ones send
  GOAWAY and finish the streams in flight);
- nginx: the http2 group's config (``benches.nginx``, ``h2-hello``: ``return
  200``) with ``worker_processes 2``, reloaded with ``nginx -s reload``.

h2load never retries: a stream in flight when a connection ends (a GOAWAY
whose last stream id is below it, or the connection closed) counts as
"errored", as do the streams it would have opened on that connection. The
figures are h2load's own: requests done, succeeded, errored, and the 2xx
count. RFC 9113 section 6.8's retrying client, which resends the streams a
GOAWAY says were not processed, is tests/test_http2_lifecycle.py's
``H2Load`` (zero lost there).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benches.h2load import parse_h2load_output
from benches.nginx import write_config

REPO = Path(__file__).resolve().parent.parent
RUSH = REPO / ".venv" / "bin" / "rush"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int) -> None:
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on {port}")


def run_load(port: int, path: str, args: argparse.Namespace, reload: list[str] | None, reload_pid: int | None) -> dict:
    """h2load against ``port`` for ``args.seconds``, with two reloads (by the
    command ``reload`` or SIGHUP to ``reload_pid``); h2load's counts."""
    command = [
        "h2load",
        f"-c{args.connections}",
        f"-m{args.streams}",
        f"-D{args.seconds}",
        "--warm-up-time=1",
        f"http://127.0.0.1:{port}{path}",
    ]
    load = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    os.sched_setaffinity(load.pid, {1})
    for step in (1, 2):
        time.sleep(1 + args.seconds * step / 3)  # a timed schedule, not a synchronisation: the load runs regardless
        if reload is not None:
            subprocess.run(reload, check=True, capture_output=True)
        elif reload_pid is not None:
            os.kill(reload_pid, signal.SIGHUP)
    output, _ = load.communicate(timeout=args.seconds + 60)
    result = parse_h2load_output(output)
    return {
        "done": result.done,
        "succeeded": result.succeeded,
        "errored": result.errored,
        "failed": result.failed,
        "2xx": result.statuses.get("2xx", 0),
        "req/s": result.requests_per_second,
    }


def rush_run(args: argparse.Namespace) -> dict:
    port = free_port()
    server = subprocess.Popen(
        [
            *("taskset", "-c", "0", str(RUSH), "benches.apps.rush_app:app", "--http", "auto", "--workers", "2"),
            *("--port", str(port), "--log-level", "warning"),
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port)
        return run_load(port, "/", args, None, server.pid)
    finally:
        server.terminate()
        server.wait(30)


def nginx_run(args: argparse.Namespace) -> dict:
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="h2reload-nginx-"))
    config = write_config(
        "h2-hello", host="127.0.0.1", port=port, workdir=workdir, site_dir=workdir, open_file_cache=False
    )
    # Two workers, as rush runs two: a reload replaces both.
    config.write_text(config.read_text().replace("worker_processes 1;", "worker_processes 2;"))
    base = ["nginx", "-p", str(workdir), "-c", str(workdir / "nginx.conf"), "-e", "stderr"]
    server = subprocess.Popen(
        ["taskset", "-c", "0", *base, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_listening(port)
        return run_load(port, "/", args, [*base, "-s", "reload"], None)
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not shutil.which("nginx") or not shutil.which("h2load"):
        sys.exit("needs nginx and h2load (make test-tools installs both)")
    print(f"h2load -c{args.connections} -m{args.streams} -D{args.seconds}, two reloads in each run")
    print("| server | run | done | succeeded | errored | 2xx | req/s |")
    print("| --- | --: | --: | --: | --: | --: | --: |")
    for name, run in (("rush (SIGHUP)", rush_run), ("nginx (-s reload)", nginx_run)):
        for repeat in range(args.repeats):
            row = run(args)
            print(
                f"| {name} | {repeat + 1} | {row['done']:,} | {row['succeeded']:,} | {row['errored']:,}"
                f" | {row['2xx']:,} | {row['req/s']:,.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
