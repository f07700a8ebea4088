"""Runs the rush command in this process and records, one line each, what
its supervisor does with processes: ``fork PID``, ``reap PID STATUS``
(an answer of os.waitpid) and ``kill PID SIGNAL`` (os.kill), appended to the
file named by ``RUSHTEST_TRACE_FILE``. Workers are forks of this process and
inherit the wrappers, which record only the supervisor's own calls.

While the file named by ``RUSHTEST_FAIL_FORK_FILE`` (if set) exists, os.fork
fails with EAGAIN, as the kernel's fork does when the user may have no more
processes: RLIMIT_NPROC never applies to root, so a test cannot count on it.

The tests read the trace once rush has exited (`check_trace` in
test_supervisor.py): no pid is signalled after it was reaped (it may belong
to another process by then), and every forked worker was reaped.

Usage: python tests/traced_rush.py APP [rush options...]
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

TRACE = os.environ["RUSHTEST_TRACE_FILE"]
FAIL_FORK = os.environ.get("RUSHTEST_FAIL_FORK_FILE")
SUPERVISOR = os.getpid()
_fork, _waitpid, _kill = os.fork, os.waitpid, os.kill


def record(line: str) -> None:
    """Appends one line; the file is opened only for the write, so that no
    descriptor of the tracer outlives the call (nor is inherited by a worker)."""
    if os.getpid() != SUPERVISOR:
        return
    fd = os.open(TRACE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def fork() -> int:
    if FAIL_FORK is not None and os.path.exists(FAIL_FORK):
        record("fork-failed 0")
        raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
    pid = _fork()
    if pid:
        record(f"fork {pid}")
    return pid


def waitpid(pid: int, options: int) -> Any:
    result = _waitpid(pid, options)
    if result[0]:
        record(f"reap {result[0]} {result[1]}")
    return result


def kill(pid: int, signum: int) -> None:
    record(f"kill {pid} {int(signum)}")
    _kill(pid, signum)


os.fork, os.waitpid, os.kill = fork, waitpid, kill

if __name__ == "__main__":
    from rush.cli import main

    sys.exit(main(sys.argv[1:]))
