"""Preloading side by side (issue 34): the memory of 4 workers of a Django
project with a heavy import, under rush and gunicorn, each with and without
its preload switch, in one run; and rush's time from start to READY=1.

    python -m benches.preload [--workers 4] [--requests 1000] [--repeats 3]

The app is benches/apps/django_heavy.py (the admin and 300 models of ten
fields registered in it: about 45 MB of import per process). Each server
runs on core 0 (``taskset -c 0``): ``rush APP --workers 4 [--preload]``
and ``gunicorn APP --workers 4 [--preload]`` (sync workers). The client,
on core 1, sends ``--requests`` requests per worker, each on a new
connection so that the kernel spreads them over the workers, and checks
every answer (200, the 300 models, a worker's pid) before the memory is
read. Then the Pss of each worker (``/proc/PID/smaps_rollup``, the
supervisor's children) is summed, and the supervisor's own Pss given
beside it: with preload the supervisor holds the shared pages too, so the
sum over every process is also shown.

The time to READY: rush is started with ``NOTIFY_SOCKET`` pointing at a
datagram socket of this script, and the time from the start of the process
to its ``READY=1`` (which rush sends once every worker serves) is measured,
``--repeats`` times, with and without ``--preload``. gunicorn sends
``READY=1`` as its arbiter starts, before any worker has loaded the app,
so it has no comparable figure.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = REPO / ".venv" / "bin"
APP = "benches.apps.django_heavy:application"
MODELS = 300


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def children(pid: int) -> list[int]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as file:
            found += [int(child) for child in file.read().split()]
    return found


def pss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as file:
        for line in file:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    raise RuntimeError(f"no Pss for {pid}")


def get(port: int) -> tuple[int, bytes]:
    """One request on a new connection: (status, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", "/", headers={"Connection": "close"})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def load_and_check(port: int, count: int) -> set[int]:
    """``count`` requests, every answer checked; the worker pids that answered."""
    pids = set()
    for _ in range(count):
        status, body = get(port)
        models, _fields, pid = body.split()
        # The admin also knows auth's User and Group.
        if status != 200 or int(models) != MODELS + 2:
            raise RuntimeError(f"a wrong answer: {status} {body[:80]!r}")
        pids.add(int(pid))
    return pids


def measure(name: str, command: list[str], port: int, args: argparse.Namespace) -> dict:
    server = subprocess.Popen(
        ["taskset", "-c", "0", *command], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_listening(port, server)
        answered = load_and_check(port, args.requests * args.workers)
        workers = children(server.pid)
        if len(workers) != args.workers:
            raise RuntimeError(f"{name}: {len(workers)} workers, not {args.workers}")
        if not answered <= set(workers):
            raise RuntimeError(f"{name}: answers from pids that are not its workers")
        worker_pss = sum(pss_kib(pid) for pid in workers)
        supervisor_pss = pss_kib(server.pid)
        return {
            "name": name,
            "workers_mib": worker_pss / 1024,
            "supervisor_mib": supervisor_pss / 1024,
            "all_mib": (worker_pss + supervisor_pss) / 1024,
            "answering": len(answered),
        }
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)


def time_to_ready(preload: bool, args: argparse.Namespace) -> float:
    """Seconds from rush's start to its READY=1."""
    directory = Path(tempfile.mkdtemp(prefix="preload-notify-"))
    address = str(directory / "notify")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(120)
    port = free_port()
    command = [str(BIN / "rush"), APP, "--workers", str(args.workers), "--port", str(port), "--log-level", "warning"]
    environment = {**os.environ, "NOTIFY_SOCKET": address}
    started = time.perf_counter()
    server = subprocess.Popen(
        ["taskset", "-c", "0", *command, *(["--preload"] if preload else [])],
        cwd=REPO,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while b"READY=1" not in listener.recv(4096).split(b"\n"):
            pass
        return time.perf_counter() - started
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        listener.close()
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--requests", type=int, default=1000, help="requests per worker")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the time to READY")
    args = parser.parse_args()
    if not (BIN / "gunicorn").exists():
        sys.exit("needs gunicorn in .venv (make build installs it)")
    os.sched_setaffinity(0, {1})
    rows = []
    for name, preload in (("rush", False), ("rush --preload", True)):
        port = free_port()
        command = [str(BIN / "rush"), APP, "--workers", str(args.workers), "--port", str(port)]
        command += ["--log-level", "warning", *(["--preload"] if preload else [])]
        rows.append(measure(name, command, port, args))
    for name, preload in (("gunicorn", False), ("gunicorn --preload", True)):
        port = free_port()
        command = [str(BIN / "gunicorn"), APP, "--workers", str(args.workers), "--bind", f"127.0.0.1:{port}"]
        command += ["--log-level", "warning", *(["--preload"] if preload else [])]
        rows.append(measure(name, command, port, args))
    print(f"{args.workers} workers of {APP}, {args.requests} checked requests per worker, Pss in MiB")
    print("| server | workers' Pss | supervisor's Pss | all processes | workers that answered |")
    print("| --- | --: | --: | --: | --: |")
    for row in rows:
        print(
            f"| {row['name']} | {row['workers_mib']:.1f} | {row['supervisor_mib']:.1f} |"
            f" {row['all_mib']:.1f} | {row['answering']} |"
        )
    without, with_preload = rows[0]["workers_mib"], rows[1]["workers_mib"]
    print(f"rush: workers' Pss with --preload {with_preload / without:.2f}x without")
    print(f"rush --preload against gunicorn --preload (workers): {with_preload / rows[3]['workers_mib']:.2f}x")
    for preload in (False, True):
        times = [time_to_ready(preload, args) for _ in range(args.repeats)]
        label = "with" if preload else "without"
        print(
            f"rush start to READY=1 {label} --preload: median {statistics.median(times):.2f} s"
            f" (runs: {', '.join(f'{t:.2f}' for t in times)})"
        )


if __name__ == "__main__":
    main()
