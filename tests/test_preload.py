"""``--preload``: the app imported once in the supervisor, its memory shared
by the workers forked from it (python/rush/preload.py).

Real rush processes serve tests/apps/preloaded.py, whose import appends its
pid to a file and can allocate a large graph of small lists (objects the
garbage collector tracks). The oracle for sharing is the kernel's own
accounting, ``/proc/PID/smaps_rollup``: Pss splits each shared page among
the processes mapping it, and Private_Dirty counts the pages a process
wrote to (its copies). The app's lifespan startup runs ``gc.collect()`` in
each worker, so a worker whose collector still walked the preloaded
objects shows them as its own dirty pages.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest
from support import GUARD_TIMEOUT, Connection, RushServer, ServerFactory, clean_environment, request, wait_for

APP = "tests.apps.preloaded:app"
# About 190 MB of small lists (three ints each).
ITEMS = 1_000_000


def start(
    rush_server: ServerFactory, directory: Path, *args: str, workers: int = 2, wait: bool = True, **env: str
) -> RushServer:
    environment = clean_environment({"PRELOAD_TEST_DIR": str(directory), **env})
    return rush_server(APP, "--workers", str(workers), *args, env=environment, wait=wait)


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def wait_for_startups(server: RushServer, directory: Path, count: int) -> list[str]:
    """Waits until ``count`` lifespan startups (one per worker) completed."""
    return wait_for(
        lambda: (found := lines(directory / "startups")) and len(found) >= count and found,
        f"{count} lifespan startups\n{server.describe()}",
    )


def get(server: RushServer) -> str:
    with server.connect() as connection:
        connection.send(request())
        response = connection.read_response()
    assert response.status == 200, response
    return response.text


def memory(pid: int) -> dict[str, int]:
    """Pss and Private_Dirty of a process, in bytes."""
    found = {}
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            name, _, value = line.partition(":")
            if name in ("Pss", "Private_Dirty"):
                found[name] = int(value.split()[0]) * 1024
    return found


@pytest.mark.parametrize("preload", [True, False], ids=["preload", "no-preload"])
def test_the_import_runs_once_with_preload_and_lifespan_in_every_worker(
    rush_server: ServerFactory, tmp_path: Path, preload: bool
) -> None:
    server = start(rush_server, tmp_path, *(["--preload"] if preload else []), workers=3)
    startups = wait_for_startups(server, tmp_path, 3)
    workers = server.wait_for_workers(3)
    imports = lines(tmp_path / "imports")
    if preload:
        assert imports == [str(server.pid)], "the supervisor alone imports the app"
    else:
        assert sorted(imports) == sorted(str(pid) for pid in workers), "each worker imports the app"
    # ASGI lifespan runs after the fork, in each worker, with or without --preload.
    assert sorted(startups) == sorted(str(pid) for pid in workers)


def test_preloaded_workers_share_the_apps_memory(rush_server: ServerFactory, tmp_path: Path) -> None:
    shared_dir, private_dir = tmp_path / "preload", tmp_path / "private"
    shared_dir.mkdir()
    private_dir.mkdir()
    workers = 2
    usage = {}
    for directory, args in ((shared_dir, ["--preload"]), (private_dir, [])):
        server = start(rush_server, directory, *args, workers=workers, PRELOAD_TEST_ITEMS=str(ITEMS))
        wait_for_startups(server, directory, workers)  # gc.collect() ran in each worker
        usage[directory] = [memory(pid) for pid in server.wait_for_workers(workers)]
        assert server.stop() == 0
    size = int((shared_dir / "size").read_text())
    assert size > 100 * 2**20, f"the app allocated only {size} bytes"
    shared, private = usage[shared_dir], usage[private_dir]
    # The measure tells the two apart: each worker that imported the app itself holds its own copy.
    assert sum(worker["Pss"] for worker in private) > 0.9 * workers * size, private
    # Preloaded, the pages are the supervisor's, shared with the workers.
    assert sum(worker["Pss"] for worker in shared) < 0.6 * workers * size, shared
    # gc.freeze() before the fork: a worker's collection did not copy the frozen objects' pages.
    for worker in shared:
        assert worker["Private_Dirty"] < 0.2 * size, shared


def test_a_thread_started_at_import_is_named_once(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = start(rush_server, tmp_path, "--preload", workers=2, PRELOAD_TEST_THREAD="import-time-poller")
    wait_for_startups(server, tmp_path, 2)
    server.send_signal(signal.SIGHUP)  # forks two more workers: the thread is not named again
    server.wait_for_log(r"reload finished: 2 worker\(s\) replaced")
    warnings = server.wait_for_log(r"\[WARNING\] --preload: 1 thread\(s\) alive .*'import-time-poller'")
    assert len(warnings) == 1, server.describe()
    assert server.stderr_text().count("thread(s) alive") == 1, server.describe()


def test_no_thread_no_warning(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = start(rush_server, tmp_path, "--preload", workers=2)
    wait_for_startups(server, tmp_path, 2)
    assert "thread(s) alive" not in server.stderr_text()


def test_sighup_restarts_the_workers_on_the_preloaded_code_without_failing_a_request(
    rush_server: ServerFactory, tmp_path: Path
) -> None:
    (tmp_path / "version").write_text("1")
    server = start(rush_server, tmp_path, "--preload", workers=2)
    wait_for_startups(server, tmp_path, 2)
    old_workers = server.wait_for_workers(2)
    (tmp_path / "version").write_text("2")  # new code on disk: --preload documents that a HUP does not load it
    stop = threading.Event()
    answers: list[str] = []
    failures: list[str] = []

    def client() -> None:
        for _ in range(20000):  # bounded; stops when the reload is over
            if stop.is_set():
                return
            try:
                with Connection(server.address, server.family, timeout=GUARD_TIMEOUT) as connection:
                    connection.send(request(headers=[("Connection", "close")]))
                    answers.append(connection.read_response().text)
            except (OSError, AssertionError) as error:
                failures.append(repr(error))

    thread = threading.Thread(target=client)
    thread.start()
    try:
        wait_for(lambda: len(answers) >= 10, "requests answered before the reload")
        server.send_signal(signal.SIGHUP)
        server.wait_for_log(r"reload finished: 2 worker\(s\) replaced")
        new_workers = server.wait_for_workers(2)
        assert not new_workers & old_workers
        wait_for(
            lambda: {int(answer.split()[0]) for answer in answers[-200:]} & new_workers,
            "a request answered by a new worker",
        )
    finally:
        stop.set()
        thread.join(GUARD_TIMEOUT)
    assert not failures, failures[:5]
    served_by = {int(answer.split()[0]) for answer in answers}
    assert served_by & old_workers and served_by & new_workers
    # The new workers run the code imported at start, and nothing imported it again.
    assert {answer.split()[1] for answer in answers} == {"1"}
    assert lines(tmp_path / "imports") == [str(server.pid)]
    assert len(lines(tmp_path / "startups")) == 4, "lifespan ran in each new worker"
    assert "--preload: the new workers run the application imported at start" in server.stderr_text()


def test_a_dead_workers_successor_is_forked_from_the_preloaded_app(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = start(rush_server, tmp_path, "--preload", workers=2)
    server.allow_worker_deaths = True
    wait_for_startups(server, tmp_path, 2)
    victim = sorted(server.wait_for_workers(2))[0]
    os.kill(victim, signal.SIGKILL)
    wait_for_startups(server, tmp_path, 3)
    assert victim not in server.wait_for_workers(2)
    assert get(server).split()[1] == "1"
    assert lines(tmp_path / "imports") == [str(server.pid)], "the successor did not import the app"


def test_an_import_error_stops_rush_once_with_the_traceback(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = start(rush_server, tmp_path, "--preload", workers=3, wait=False, PRELOAD_TEST_FAIL="1")
    assert server.wait_exit() == 3
    log = server.stderr_text()
    assert log.count("could not load the application") == 1, log
    assert log.count("Traceback (most recent call last)") == 1, log
    assert "--preload: could not load the application" in log
    assert 'preloaded.py", line' in log, "the traceback shows the app's own line"
    assert "started worker" not in log, "nothing was forked"
    assert lines(tmp_path / "imports") == [str(server.pid)]


def test_preload_with_reload_is_refused(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = start(rush_server, tmp_path, "--preload", "--reload", workers=1, wait=False)
    assert server.wait_exit() == 2
    assert "--preload cannot be combined with --reload" in server.stderr_text()
    assert lines(tmp_path / "imports") == []
