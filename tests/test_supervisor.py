"""The supervisor's state machine under races, over real processes: signals
that arrive during a reload (TERM stops new and old workers at once, a
second HUP starts the reload over), a worker killed during a reload, a
retired worker that overruns ``--graceful-timeout`` (killed at its own
deadline, even across a second reload), a fork or pipe that fails (retried
with the respawn delay), TTOU down to one worker and once more, TTIN and
TTOU back to back, TERM during a respawn's delay, and which descriptors a
worker inherits.

Most servers here run under tests/traced_rush.py, which records every fork,
reap and signal of the supervisor: `check_trace` then proves that no pid was
signalled after it was reaped and that every worker was reaped. Slow workers
come from tests/apps/held.py: while the hold file exists, a new worker waits
in the middle of loading the app, so a reload stays in progress for as long
as the test needs.
"""

from __future__ import annotations

import os
import re
import resource
import signal
from pathlib import Path

import pytest
from support import (
    PYTHON,
    REPO,
    Gate,
    RushServer,
    ServerFactory,
    clean_environment,
    fd_targets,
    is_alive,
    request,
    wait_for,
    zombie_children,
)

TRACED_RUSH = [str(PYTHON), str(REPO / "tests" / "traced_rush.py")]


# ---------------------------------------------------------------------------
# Helpers


def traced(rush_server: ServerFactory, tmp_path: Path, app: str, *args: str, **options: object) -> RushServer:
    """A rush server run by tests/traced_rush.py, with the hold file of
    tests/apps/held.py at ``tmp_path / "hold"`` (absent: workers start at once)."""
    env = clean_environment(
        {"RUSHTEST_TRACE_FILE": str(tmp_path / "trace"), "RUSHTEST_HOLD_FILE": str(tmp_path / "hold")}
        | dict(options.pop("env", {}))  # type: ignore[call-overload]
    )
    server = rush_server(app, *args, command=TRACED_RUSH, env=env, **options)
    server.trace_path = tmp_path / "trace"  # type: ignore[attr-defined]
    return server


def check_trace(server: RushServer) -> None:
    """Once rush has exited: no signal went to a pid after the supervisor
    reaped it, and every worker it forked was reaped."""
    assert server.proc is not None and server.proc.poll() is not None, "check_trace needs rush to have exited"
    forked: set[int] = set()
    reaped: set[int] = set()
    for number, line in enumerate(server.trace_path.read_text().splitlines(), 1):  # type: ignore[attr-defined]
        kind, pid_text, *rest = line.split()
        pid = int(pid_text)
        if kind == "fork":
            forked.add(pid)
        elif kind == "reap":
            assert pid in forked, f"trace line {number}: reaped {pid}, which the supervisor did not fork"
            reaped.add(pid)
        elif kind == "kill":
            name = signal.Signals(int(rest[0])).name
            assert pid in forked, f"trace line {number}: {name} sent to {pid}, which is no worker"
            assert pid not in reaped, f"trace line {number}: {name} sent to {pid} after it was reaped"
    assert forked, "the trace recorded no fork"
    assert forked == reaped, f"workers never reaped: {sorted(forked - reaped)}"


def wait_serving(server: RushServer, count: int) -> set[int]:
    """Waits until ``count`` workers run and have loaded the app (before a
    test holds the next ones); returns their pids."""
    server.wait_for_log(r"worker \d+ serving tests\.apps\.", count=count)
    return server.wait_for_workers(count)


def hold(tmp_path: Path) -> Path:
    """Makes the next workers wait while loading tests/apps/held.py."""
    path = tmp_path / "hold"
    path.touch()
    return path


def held_workers(tmp_path: Path) -> set[int]:
    """The workers that started loading the app while it was held."""
    return {int(path.name.rpartition(".")[2]) for path in tmp_path.glob("hold.*")}


def started_workers(server: RushServer, after: str | None = None) -> list[int]:
    """PIDs of the workers the supervisor started (from its log), in order;
    with ``after``, only those started after the last line matching it."""
    text = server.stderr_text()
    if after is not None:
        matches = list(re.finditer(after, text))
        text = text[matches[-1].end() :] if matches else ""
    return [int(pid) for pid in re.findall(r"started worker (\d+)", text)]


def get_pid(server: RushServer) -> int:
    """Which worker answers a fresh connection."""
    with server.connect() as connection:
        connection.send(request("GET", "/pid", [("Connection", "close")]))
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200], result
    return int(result.responses[0].body)


def assert_served_by(server: RushServer, workers: set[int]) -> None:
    """Fresh connections are answered by these workers and no other, and
    each of them answers one (servers with several workers use their own
    SO_REUSEPORT socket per worker, which spreads the connections)."""
    answered: set[int] = set()

    def everyone_answered() -> bool:
        pid = get_pid(server)
        assert pid in workers, f"worker {pid} answered; expected only {workers}"
        answered.add(pid)
        return answered == workers

    wait_for(everyone_answered, f"each of {workers} to answer a connection")


def assert_no_zombies(server: RushServer) -> None:
    wait_for(lambda: not zombie_children(server.pid), "the supervisor to reap every exited worker")


def stop_and_check(server: RushServer) -> None:
    """TERM: rush exits 0, every worker it started is gone, each was reaped."""
    workers = set(started_workers(server))
    assert server.stop() == 0
    assert not [pid for pid in workers if is_alive(pid)]
    check_trace(server)


def reloads_settled(server: RushServer) -> bool:
    """Every reload that started has finished (or was given up)."""
    text = server.stderr_text()
    started = len(re.findall(r"received SIGHUP: replacing workers one by one", text))
    ended = len(re.findall(r"reload finished|reload aborted", text))
    return started > 0 and started == ended


# ---------------------------------------------------------------------------
# Signals during a reload


def test_sigterm_during_a_reload_stops_new_and_old_workers_at_once(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(rush_server, tmp_path, "held", "--workers", "2", "--graceful-timeout", "30")
    old = wait_serving(server, 2)
    release = hold(tmp_path)
    try:
        server.send_signal(signal.SIGHUP)
        new = wait_for(lambda: held_workers(tmp_path), "the reload's new worker to start loading the app")
        server.send_signal(signal.SIGTERM)
        # The new worker is still loading the app: a supervisor that waited
        # for it before handling TERM would still be running here.
        assert server.wait_exit() == 0
    finally:
        release.unlink()
    assert not [pid for pid in old | new if is_alive(pid)]
    server.wait_for_log("received SIGTERM: shutting down gracefully")
    check_trace(server)


def test_sighup_then_sigterm_right_after(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(rush_server, tmp_path, "basic", "--workers", "2")
    server.wait_for_workers(2)
    server.send_signal(signal.SIGHUP)
    server.send_signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    assert not [pid for pid in started_workers(server) if is_alive(pid)]
    check_trace(server)


def test_two_sighups_back_to_back_replace_every_worker_once_settled(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(rush_server, tmp_path, "basic", "--workers", "2", bind="port")
    old = server.wait_for_workers(2)
    server.send_signal(signal.SIGHUP)
    server.send_signal(signal.SIGHUP)  # the kernel may merge it with the first

    def settled() -> set[int] | None:
        if not reloads_settled(server):
            return None
        current = server.worker_pids()
        newest = set(started_workers(server, after=r"received SIGHUP"))
        return current if len(current) == 2 and current <= newest else None

    new = wait_for(settled, "the reload to finish with workers started after the last SIGHUP")
    assert not new & old
    assert_served_by(server, new)
    assert_no_zombies(server)
    stop_and_check(server)


def test_sighup_during_a_reload_starts_it_over(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(rush_server, tmp_path, "held", "--workers", "2", bind="port")
    old = wait_serving(server, 2)
    release = hold(tmp_path)
    try:
        server.send_signal(signal.SIGHUP)
        (first,) = wait_for(lambda: held_workers(tmp_path), "the reload's first new worker to start")
        server.send_signal(signal.SIGHUP)
        server.wait_for_log("received SIGHUP during a reload: starting it over")
    finally:
        release.unlink()
    # The worker the first round was starting may have loaded the code the
    # second SIGHUP replaces: it is retired, and the reload starts again.
    server.wait_for_log(rf"retiring worker {first}: superseded by a newer SIGHUP")
    new = wait_for(
        lambda: (
            reloads_settled(server) and len(pids := server.worker_pids()) == 2 and not pids & (old | {first}) and pids
        ),
        "the reload to finish with two new workers",
    )
    assert new <= set(started_workers(server, after="received SIGHUP during a reload"))
    assert_served_by(server, new)
    assert_no_zombies(server)
    stop_and_check(server)


@pytest.mark.parametrize("victim", ["replaced", "waiting", "new"])
def test_a_worker_killed_during_a_reload(rush_server: ServerFactory, tmp_path: Path, victim: str) -> None:
    """``replaced``: the old worker whose successor is starting (the successor
    takes its slot); ``waiting``: the other old worker, whose turn has not
    come (its slot gets a new worker as after any crash); ``new``: the
    successor (the reload is given up, the old workers go on)."""
    server = traced(rush_server, tmp_path, "held", "--workers", "2", bind="port", allow_worker_deaths=True)
    old = wait_serving(server, 2)
    release = hold(tmp_path)
    try:
        server.send_signal(signal.SIGHUP)
        (successor,) = wait_for(lambda: held_workers(tmp_path), "the reload's new worker to start")
        # The successor was forked with its slot's socket, as is the old worker it replaces.
        (replaced,) = [pid for pid in old if sockets(pid) & sockets(successor)]
        target = {"replaced": replaced, "waiting": min(old - {replaced}), "new": successor}[victim]
        os.kill(target, signal.SIGKILL)
        server.wait_for_log(rf"worker {target} died")
    finally:
        release.unlink()
    if victim == "new":
        server.wait_for_log("reload aborted")
        final = wait_for(lambda: server.worker_pids() == old and old, "the old workers alone")
    else:
        final = wait_for(
            lambda: reloads_settled(server) and len(pids := server.worker_pids()) == 2 and not pids & old and pids,
            "the reload to settle with two new workers",
        )
        assert successor in final
    assert target not in final
    assert_served_by(server, final)
    assert_no_zombies(server)
    stop_and_check(server)


def sockets(pid: int) -> set[str]:
    return {target for target in fd_targets(pid).values() if target.startswith("socket:")}


# ---------------------------------------------------------------------------
# The graceful deadline of a retired worker


def test_a_retired_worker_is_killed_at_its_graceful_deadline_even_across_reloads(
    rush_server: ServerFactory, tmp_path: Path
) -> None:
    server = traced(rush_server, tmp_path, "basic", "--graceful-timeout", "1")
    old = server.single_worker()
    gate = Gate(tmp_path, "overrun")
    try:
        with server.connect() as busy:
            busy.send(request("GET", gate.target))
            assert gate.wait_entered() == old
            server.send_signal(signal.SIGHUP)
            server.wait_for_log(rf"retiring worker {old}: replaced by worker \d+ \(SIGHUP\)")
            # A second reload while the first one's retired worker still runs.
            server.send_signal(signal.SIGHUP)
            server.wait_for_log("reload finished", count=2)
            # Its handler never returns: the worker is killed at its deadline.
            server.wait_for_log(rf"worker {old} did not stop within --graceful-timeout \(1 s\): killing it")
            assert busy.read_until_close().responses == []
    finally:
        gate.release()
    wait_for(lambda: not os.path.exists(f"/proc/{old}"), "the killed worker to be reaped")
    server.wait_for_log(rf"retired worker {old} exited \(signal SIGKILL\)")
    current = server.single_worker()
    assert get_pid(server) == current
    stop_and_check(server)


def test_sigterm_kills_a_worker_that_overruns_the_graceful_timeout(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(rush_server, tmp_path, "basic", "--graceful-timeout", "1")
    worker = server.single_worker()
    gate = Gate(tmp_path, "overrun")
    try:
        with server.connect() as busy:
            busy.send(request("GET", gate.target))
            gate.wait_entered()
            server.send_signal(signal.SIGTERM)
            assert server.wait_exit() == 0
            assert busy.read_until_close().responses == []
    finally:
        gate.release()
    assert not is_alive(worker)
    server.wait_for_log(rf"worker {worker} did not stop within --graceful-timeout \(1 s\): killing it")
    check_trace(server)


# ---------------------------------------------------------------------------
# Failing to start a worker


def no_ready_pipe(pid: int) -> dict[int, str] | None:
    """The descriptors of the supervisor ``pid`` if it holds no ready pipe
    (its only pipe is then its wake-up pipe, both ends)."""
    descriptors = fd_targets(pid)
    pipes = [target for target in descriptors.values() if target.startswith("pipe:")]
    return descriptors if len(pipes) == 2 and len(set(pipes)) == 1 else None


def lowest_free_fd(pid: int) -> int:
    used = set(fd_targets(pid))
    return min(set(range(len(used) + 1)) - used)


@pytest.mark.parametrize("failing", ["pipe", "fork"])
def test_a_failing_pipe_or_fork_is_retried_with_the_respawn_delay(
    rush_server: ServerFactory, tmp_path: Path, failing: str
) -> None:
    """The ready pipe fails for real (RLIMIT_NOFILE lowered under the
    supervisor); fork() fails with EAGAIN through tests/traced_rush.py."""
    fail_fork = tmp_path / "fail-fork"
    if failing == "fork":
        env = {"RUSHTEST_FAIL_FORK_FILE": str(fail_fork)}
        server = traced(rush_server, tmp_path, "basic", env=env, allow_worker_deaths=True)
    else:
        # Not traced: the tracer opens its file for each line it writes.
        server = rush_server("basic", allow_worker_deaths=True)
    worker = server.single_worker()
    descriptors = wait_for(lambda: no_ready_pipe(server.pid), "the supervisor to read its worker's ready pipe")
    soft, hard = resource.prlimit(server.pid, resource.RLIMIT_NOFILE)
    if failing == "fork":
        fail_fork.touch()
    else:
        # No descriptor free below the limit: pipe() fails with EMFILE.
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (lowest_free_fd(server.pid), hard))
    try:
        os.kill(worker, signal.SIGKILL)
        server.wait_for_log(r"cannot start a worker in slot 0: .*; trying again in 0\.1 s")
        server.wait_for_log(r"cannot start a worker in slot 0: .*; trying again in 0\.2 s")
        server.assert_running("after a failed fork")
    finally:
        fail_fork.unlink(missing_ok=True)
        resource.prlimit(server.pid, resource.RLIMIT_NOFILE, (soft, hard))
    replacement = server.single_worker()
    assert replacement != worker
    assert get_pid(server) == replacement
    # The failed attempts left no descriptor open in the supervisor.
    wait_for(lambda: fd_targets(server.pid) == descriptors, "the supervisor's descriptors as before")
    if failing == "fork":
        stop_and_check(server)
    else:
        assert server.stop() == 0


# ---------------------------------------------------------------------------
# Changing the number of workers


def test_sigttou_never_goes_below_one_worker(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(rush_server, tmp_path, "basic", "--workers", "2")
    wait_serving(server, 2)
    first, second = started_workers(server)
    server.send_signal(signal.SIGTTOU)
    assert server.wait_for_workers(1) == {first}
    server.wait_for_log(rf"retiring worker {second}: slot 1 removed \(SIGTTOU\)")
    server.wait_for_log(rf"retired worker {second} exited \(exit code 0\)")
    server.send_signal(signal.SIGTTOU)
    server.wait_for_log(r"received SIGTTOU: ignored, 1 worker is the fewest")
    assert server.worker_pids() == {first}
    assert get_pid(server) == first
    assert_no_zombies(server)
    stop_and_check(server)


def test_sigttin_then_sigttou_back_to_back(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(rush_server, tmp_path, "basic")
    first = server.single_worker()
    server.send_signal(signal.SIGTTIN)
    server.send_signal(signal.SIGTTOU)
    server.wait_for_log(r"received SIGTTOU: down to 1 worker")
    assert server.wait_for_workers(1) == {first}
    assert get_pid(server) == first
    assert_no_zombies(server)
    stop_and_check(server)


# ---------------------------------------------------------------------------
# Stopping


def test_sigterm_while_a_respawn_waits_in_its_delay(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(
        rush_server,
        tmp_path,
        "crashing",
        env={"RUSHTEST_EXIT_AT_START": "7"},
        wait=False,
        allow_worker_deaths=True,
    )
    server.wait_for_log(r"starting a new one in 0\.4 s")
    server.send_signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    log = server.stderr_text()
    assert "started worker" not in log[log.index("starting a new one in 0.4 s") :]
    check_trace(server)


# ---------------------------------------------------------------------------
# Descriptors a worker inherits


def foreign_descriptors(server: RushServer, worker: int) -> set[str]:
    """What ``worker`` holds of the supervisor's sockets and pipes."""
    supervisor = {target for target in fd_targets(server.pid).values() if target.startswith(("socket:", "pipe:"))}
    return set(fd_targets(worker).values()) & supervisor


def test_a_worker_inherits_only_its_own_socket_and_ready_pipe(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = traced(rush_server, tmp_path, "held", "--workers", "2", bind="port")
    wait_serving(server, 2)
    # The supervisor's wake-up pipe: both of its ends are the supervisor's.
    supervisor = list(fd_targets(server.pid).values())
    (wake_pipe,) = {target for target in supervisor if target.startswith("pipe:") and supervisor.count(target) == 2}
    release = hold(tmp_path)
    try:
        # A third worker (its own socket), then a reload's new worker, both
        # starting (each with its ready pipe) while the others serve.
        server.send_signal(signal.SIGTTIN)
        wait_for(lambda: len(held_workers(tmp_path)) == 1, "the third worker to start")
        server.send_signal(signal.SIGHUP)
        wait_for(lambda: len(held_workers(tmp_path)) == 2, "the reload's new worker to start")
        starting = held_workers(tmp_path)
        held: dict[int, set[str]] = {pid: foreign_descriptors(server, pid) for pid in server.worker_pids()}
    finally:
        release.unlink()
    for pid, found in held.items():
        assert wake_pipe not in found, f"worker {pid} holds the supervisor's wake-up pipe"
        kinds = sorted(target.partition(":")[0] for target in found)
        expected = ["pipe", "socket"] if pid in starting else ["socket"]
        assert kinds == expected, f"worker {pid} (starting: {pid in starting}) holds {found}"
    # No two workers hold the same ready pipe.
    pipes = [target for found in held.values() for target in found if target.startswith("pipe:")]
    assert len(pipes) == len(set(pipes)) == 2
    wait_for(lambda: reloads_settled(server), "the reload to finish")
    for pid in server.wait_for_workers(3):
        found = foreign_descriptors(server, pid)
        assert len(found) == 1 and next(iter(found)).startswith("socket:"), f"worker {pid} holds {found}"
    stop_and_check(server)
