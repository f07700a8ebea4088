"""The supervisor, its workers and the command line: a killed worker is
respawned while the server keeps answering; SIGTERM/SIGINT drain (the
in-flight request finishes with 200, idle connections close, exit 0); SIGQUIT
stops at once; SIGHUP replaces every worker while requests keep succeeding;
SIGTTIN/SIGTTOU change the worker count (SIGTTIN not past the cap); a
worker that keeps dying at start is respawned with a growing delay, during
which signals are still handled, until rush gives up; --uds; configuration through RUSH_*
environment variables, ``python -m rush`` and ``rush.run``; ``--help``,
``--version``, the access log and log level; and clear, non-zero exits for an
app that cannot be loaded or a port that cannot be bound.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from rush.config import worker_cap
from support import (
    GUARD_TIMEOUT,
    PYTHON,
    REPO,
    RUSH,
    Gate,
    RushServer,
    ServerFactory,
    clean_environment,
    is_alive,
    request,
    run_rush,
    wait_for,
)


def get_pid(server: RushServer) -> int:
    """Which worker answers a fresh connection."""
    with server.connect() as connection:
        connection.send(request("GET", "/pid", [("Connection", "close")]))
        result = connection.read_until_close()
    assert [response.status for response in result.responses] == [200], result
    return int(result.responses[0].body)


# ---------------------------------------------------------------------------
# Workers


def test_second_worker_serves_while_the_first_is_busy(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = rush_server("basic", "--workers", "2")
    workers = server.wait_for_workers(2)
    gate = Gate(tmp_path)
    with server.connect() as busy:
        busy.send(request("GET", gate.target))
        busy_pid = gate.wait_entered()
        assert busy_pid in workers
        other_pid = get_pid(server)
        assert other_pid in workers - {busy_pid}
        gate.release()
        assert busy.read_response().status == 200


def test_killed_worker_is_respawned_and_the_server_keeps_answering(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--workers", "2", allow_worker_deaths=True)
    workers = server.wait_for_workers(2)
    victim = min(workers)
    os.kill(victim, signal.SIGKILL)
    # Keep asking while the supervisor notices and replaces it.
    answered = []

    def replaced() -> set[int] | None:
        answered.append(get_pid(server))
        pids = server.worker_pids()
        return pids if len(pids) == 2 and victim not in pids else None

    new_workers = replaced() or wait_for(replaced, "a replacement for the killed worker")
    assert victim not in answered[1:]
    assert len(new_workers - workers) == 1
    server.wait_for_log(rf"worker {victim} died \(signal SIGKILL\)")
    for _ in range(4):
        assert get_pid(server) in new_workers


def test_killing_the_only_worker_does_not_lose_the_next_request(rush_server: ServerFactory) -> None:
    server = rush_server("basic", allow_worker_deaths=True)
    victim = server.single_worker()
    os.kill(victim, signal.SIGKILL)
    # The connection waits in the listen queue until the new worker takes it.
    replacement = get_pid(server)
    assert replacement != victim
    assert server.single_worker() == replacement


def test_every_worker_killed_at_once_is_replaced(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--workers", "2", allow_worker_deaths=True)
    workers = server.wait_for_workers(2)
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    new_workers = wait_for(
        lambda: (pids := server.worker_pids()) and len(pids) == 2 and not pids & workers and pids, "two new workers"
    )
    assert get_pid(server) in new_workers


def test_sighup_replaces_every_worker_while_requests_keep_succeeding(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--workers", "2")
    old = server.wait_for_workers(2)
    server.send_signal(signal.SIGHUP)
    answered: list[int] = []

    def replaced() -> set[int] | None:
        answered.append(get_pid(server))  # fails the test if any request fails
        pids = server.worker_pids()
        return pids if len(pids) == 2 and not pids & old else None

    new = wait_for(replaced, "every worker replaced after SIGHUP")
    server.wait_for_log("received SIGHUP")
    assert len(answered) >= 1
    for _ in range(4):
        assert get_pid(server) in new


def test_sighup_lets_the_old_worker_finish_its_request(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = rush_server("basic", "--graceful-timeout", "60")
    old = server.single_worker()
    gate = Gate(tmp_path, "reload")
    with server.connect() as busy:
        busy.send(request("GET", gate.target))
        assert gate.wait_entered() == old
        server.send_signal(signal.SIGHUP)
        # The old worker is stuck in the handler: only a new one can answer this.
        new = get_pid(server)
        assert new != old
        gate.release()
        response = busy.read_response()
        assert (response.status, response.text) == (200, "released reload.release")
        busy.assert_closed()  # the old worker drains and closes
    wait_for(lambda: not is_alive(old), "the replaced worker to exit")
    assert server.worker_pids() == {new}


def test_sighup_with_a_broken_app_keeps_the_old_workers_serving(rush_server: ServerFactory, tmp_path: Path) -> None:
    broken = tmp_path / "break"
    server = rush_server("breakable", "--workers", "2", env=clean_environment({"RUSHTEST_BREAK_FILE": str(broken)}))
    old = server.wait_for_workers(2)
    # Both workers must have loaded the app before the deploy breaks it: a
    # worker that cannot load it at startup stops the server (on purpose).
    server.wait_for_log(r"serving tests\.apps\.breakable:app as a rush app", count=2)
    broken.touch()  # a bad deploy
    server.send_signal(signal.SIGHUP)
    server.wait_for_log("tests.apps.breakable is broken now")
    # The failed replacement is gone: either the old workers are all that is left, or everything stopped.
    wait_for(lambda: server.proc.poll() is not None or server.worker_pids() == old, "the failed reload to settle")
    server.assert_running("after a reload with a broken app")
    assert get_pid(server) in old
    broken.unlink()  # the deploy is fixed: the next reload works
    server.send_signal(signal.SIGHUP)
    new = wait_for(lambda: (pids := server.worker_pids()) and len(pids) == 2 and not pids & old and pids, "a reload")
    assert get_pid(server) in new


def test_sigttin_and_sigttou_add_and_remove_a_worker(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--workers", "1")
    first = server.single_worker()
    server.send_signal(signal.SIGTTIN)
    two = server.wait_for_workers(2)
    assert first in two
    server.send_signal(signal.SIGTTOU)
    server.wait_for_workers(1)
    get_pid(server)


def test_sigttin_past_the_worker_cap_is_ignored_with_a_warning(rush_server: ServerFactory) -> None:
    cap = worker_cap()
    server = rush_server("basic", "--workers", str(cap))
    workers = server.wait_for_workers(cap)
    server.send_signal(signal.SIGTTIN)
    server.wait_for_log(rf"received SIGTTIN: ignored, {cap} workers is the most allowed \(--allow-many-workers")
    # The loop handled the signal (and logged it) without starting anyone.
    server.send_signal(signal.SIGTTOU)
    assert server.wait_for_workers(cap - 1) < workers
    assert len(re.findall(r"started worker \d+", server.stderr_text())) == cap


# ---------------------------------------------------------------------------
# Respawning a worker that keeps dying


def crash_loop(rush_server: ServerFactory) -> RushServer:
    """A server whose every worker exits with status 7 as it starts (tests/apps/crashing.py)."""
    env = clean_environment({"RUSHTEST_EXIT_AT_START": "7"})
    return rush_server("crashing", env=env, wait=False, allow_worker_deaths=True)


def test_a_worker_dying_at_start_is_respawned_with_a_growing_delay_then_rush_stops(
    rush_server: ServerFactory,
) -> None:
    server = crash_loop(rush_server)
    # The delays add up to about 21 s: the guard is longer.
    assert server.wait_exit(timeout=90) == 1
    log = server.stderr_text()
    started = re.findall(r"started worker (\d+)", log)
    delays = re.findall(r"worker \d+ died \(exit code 7\) .*; starting a new one in ([\d.]+) s", log)
    print(f"\n{len(started)} workers started; delays announced: {delays}")
    assert len(started) == 10
    assert delays == ["0.1", "0.2", "0.4", "0.8", "1.6", "3.2", "5.0", "5.0", "5.0"]
    last = started[-1]
    assert re.search(
        rf"worker {last} died \(exit code 7\) .*: 10 workers in a row died within 1 s of starting; stopping", log
    )
    assert log.rstrip().endswith("rush stopped")


def test_signals_are_handled_while_a_respawn_waits(rush_server: ServerFactory) -> None:
    server = crash_loop(rush_server)
    server.wait_for_log(r"starting a new one in 3\.2 s")
    server.send_signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    log = server.stderr_text()
    waiting = log[log.index("starting a new one in 3.2 s") :]
    # TERM was handled during the delay: no worker started after it.
    assert "received SIGTERM" in waiting
    assert "started worker" not in waiting
    assert len(re.findall(r"started worker \d+", log)) == 6


def test_workers_exit_when_the_supervisor_is_killed(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--workers", "2")
    workers = server.wait_for_workers(2)
    os.kill(server.pid, signal.SIGKILL)
    server.wait_exit()
    try:
        wait_for(lambda: not any(is_alive(pid) for pid in workers), "orphaned workers to exit", timeout=5)
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# ---------------------------------------------------------------------------
# Shutdown


@pytest.mark.parametrize("app", ["basic", "async_app"])
def test_sigterm_lets_the_in_flight_request_finish_then_exits_0(
    rush_server: ServerFactory, tmp_path: Path, app: str
) -> None:
    server = rush_server(app, "--graceful-timeout", "60", "--keep-alive-timeout", "60")
    gate = Gate(tmp_path, "term")
    # A short guard: the server should close these at once, long before the 60s timeouts.
    with server.connect(timeout=5) as idle, server.connect(timeout=5) as busy:
        idle.send(request("GET", "/count"))
        assert idle.read_response().status == 200
        busy.send(request("GET", gate.target))
        gate.wait_entered()
        server.send_signal(signal.SIGTERM)
        server.wait_for_log("received SIGTERM")
        if app == "async_app":
            # The worker closes idle connections when it starts draining: once
            # this one is closed, the worker is draining for sure.
            idle.assert_closed()
        gate.release()
        response = busy.read_response()
        assert (response.status, response.text) == (200, "released term.release")
        busy.assert_closed()
        idle.assert_closed()
        assert server.wait_exit() == 0
    server.wait_for_log("rush stopped")


def test_drain_answers_the_request_in_flight_and_the_ones_pipelined_behind_it(
    rush_server: ServerFactory, tmp_path: Path
) -> None:
    server = rush_server("async_app", "--graceful-timeout", "60", "--keep-alive-timeout", "60")
    gate = Gate(tmp_path, "queued")
    with server.connect(timeout=5) as idle, server.connect(timeout=5) as busy:
        idle.send(request("GET", "/count"))
        idle.read_response()
        busy.send(request("GET", gate.target) + request("GET", "/fast?id=queued"))
        gate.wait_entered()
        server.send_signal(signal.SIGTERM)
        idle.assert_closed()  # the worker is draining
        gate.release()
        result = busy.read_until_close()
    # Every request the client had already sent is answered (closing after
    # the first would leave it to retry the rest); only the last answer
    # announces the close.
    assert [(response.status, response.text) for response in result.responses] == [
        (200, "released queued.release"),
        (200, '{"id":"queued","slept":false}'),
    ]
    assert not result.responses[0].closes
    assert result.responses[1].closes
    assert server.wait_exit() == 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_graceful_stop_closes_idle_connections_and_exits_0(rush_server: ServerFactory, signum: int) -> None:
    server = rush_server("basic", "--workers", "2", "--graceful-timeout", "60", "--keep-alive-timeout", "60")
    workers = server.wait_for_workers(2)
    with server.connect() as idle:
        idle.send(request("GET", "/"))
        assert idle.read_response().status == 200
        server.send_signal(signum)
        idle.assert_closed()
    assert server.wait_exit() == 0
    assert not any(is_alive(pid) for pid in workers)


def test_graceful_stop_answers_a_request_whose_body_is_still_arriving(
    rush_server: ServerFactory,
) -> None:
    server = rush_server("basic", "--graceful-timeout", "60", "--keep-alive-timeout", "60")
    worker = server.single_worker()
    with server.connect() as uploading:
        uploading.send(b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Length: 10\r\n\r\nhello")
        # The worker has read the head (the request is in progress) once it
        # got the signal; then the rest of the body arrives.
        server.send_signal(signal.SIGTERM)
        server.wait_for_log("received SIGTERM")
        uploading.send(b" body")
        response = uploading.read_response()
        assert response.status == 200
        assert response.json()["body"] == "hello body"
        uploading.read_until_close()
    assert server.wait_exit() == 0
    assert not is_alive(worker)


def test_sigquit_stops_at_once(rush_server: ServerFactory, tmp_path: Path) -> None:
    server = rush_server("basic", "--graceful-timeout", "60")
    worker = server.single_worker()
    gate = Gate(tmp_path, "quit")
    with server.connect() as busy:
        busy.send(request("GET", gate.target))
        gate.wait_entered()
        server.send_signal(signal.SIGQUIT)
        # No draining: the request in flight is cut off.
        assert busy.read_until_close().responses == []
    server.wait_exit()
    assert not is_alive(worker)


@pytest.mark.parametrize(
    ("first", "second"),
    [(signal.SIGINT, signal.SIGINT), (signal.SIGTERM, signal.SIGQUIT)],
    ids=["second SIGINT", "SIGQUIT after SIGTERM"],
)
def test_immediate_stop_during_a_graceful_drain(
    rush_server: ServerFactory, tmp_path: Path, first: int, second: int
) -> None:
    server = rush_server("basic", "--graceful-timeout", "60")
    worker = server.single_worker()
    gate = Gate(tmp_path, "drain")
    try:
        with server.connect(timeout=3) as busy:
            busy.send(request("GET", gate.target))
            gate.wait_entered()
            server.send_signal(first)
            server.wait_for_log(f"received {signal.Signals(first).name}")
            server.send_signal(second)
            # Stop now: the request in flight is cut off.
            assert busy.read_until_close().responses == []
            if second == signal.SIGINT:
                server.wait_for_log(r"second interrupt \(Ctrl-C pressed again\): stopping immediately")
            else:
                server.wait_for_log("received SIGQUIT: stopping immediately")
        server.wait_exit(timeout=3)
        assert not is_alive(worker)
    finally:
        gate.release()  # lets a server that ignored the second signal drain and exit
        server.wait_exit()


def test_request_outliving_the_graceful_timeout_is_cut_off(rush_server: ServerFactory) -> None:
    server = rush_server("async_app", "--graceful-timeout", "1")
    with server.connect() as busy:
        busy.send(request("GET", "/wait/forever"))
        busy.send(request("GET", "/count"))  # answered only after the suspended handler
        server.send_signal(signal.SIGTERM)
        assert busy.read_until_close().responses == []
    assert server.wait_exit() == 0


# ---------------------------------------------------------------------------
# Listening and configuration


def test_unix_domain_socket(rush_server: ServerFactory) -> None:
    server = rush_server("basic", bind="uds")
    assert server.uds_path is not None
    assert stat.S_ISSOCK(server.uds_path.stat().st_mode)
    with server.connect() as connection:
        connection.send(request("GET", "/echo?id=1") + request("POST", "/echo?id=2", body=b"over unix"))
        first, second = connection.read_responses(2)
    assert first.json()["client"] is None
    assert second.json()["body"] == "over unix"
    assert server.stop() == 0
    assert not server.uds_path.exists()


def test_unix_socket_left_over_from_a_previous_run_is_replaced(rush_server: ServerFactory, tmp_path: Path) -> None:
    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(path))  # bound, then closed without unlinking: a crash leaves this
    server = rush_server("basic", bind="uds", uds_path=path)
    with server.connect() as connection:
        connection.send(request("GET", "/"))
        assert connection.read_response().body == b"Hello, World!"


def test_unix_socket_path_that_is_a_regular_file_is_not_deleted(tmp_path: Path) -> None:
    path = tmp_path / "precious.txt"
    path.write_text("precious")
    result = run_rush("tests.apps.basic:app", "--uds", str(path))
    assert result.returncode != 0
    assert "cannot listen" in result.stderr
    assert path.read_text() == "precious"


def test_systemd_socket_activation(rush_server: ServerFactory) -> None:
    """LISTEN_PID/LISTEN_FDS: the listening socket arrives as fd 3."""
    server = rush_server(
        "",
        command=[
            "bash",
            "-c",
            'export LISTEN_PID=$$ LISTEN_FDS=1; exec "$0" tests.apps.basic:app 3<&{fd}',
            str(RUSH),
        ],
    )
    assert get_pid(server) == server.single_worker()
    assert server.stop() == 0


def test_environment_variables_configure_rush(rush_server: ServerFactory) -> None:
    env = clean_environment(
        {
            "RUSH_APP": "tests.apps.basic:app",
            "RUSH_WORKERS": "2",
            "RUSH_MAX_BODY_SIZE": "1K",
            "RUSH_ACCESS_LOG": "true",
        }
    )
    server = rush_server("", bind="env-port", env=env)  # no app argument, no flags at all
    server.wait_for_workers(2)
    with server.connect() as connection:
        connection.send(request("POST", "/echo?via=env", body=b"e" * 1024))
        assert connection.read_response().status == 200
        connection.send(request("POST", "/echo", body=b"e" * 1025))
        assert [response.status for response in connection.read_until_close().responses] == [413]
    server.wait_for_log(r'"POST /echo\?via=env HTTP/1\.1" 200 \d+', stream="stdout")


def test_flags_win_over_environment_variables(rush_server: ServerFactory) -> None:
    env = clean_environment({"RUSH_MAX_BODY_SIZE": "10", "RUSH_APP": "tests.apps.no_such_module:app"})
    server = rush_server("basic", "--max-body-size", "100", env=env)
    with server.connect() as connection:
        connection.send(request("POST", "/echo", body=b"f" * 100))
        assert connection.read_response().status == 200


def test_port_and_backlog_flags(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--backlog", "16", bind="port")
    # The banner follows the first worker's readiness, which the start-up check may beat.
    server.wait_for_log(re.escape(f"serving on http://127.0.0.1:{server.port}"))
    assert get_pid(server) == server.single_worker()


def test_python_dash_m_rush(rush_server: ServerFactory) -> None:
    server = rush_server("basic", command=[str(PYTHON), "-m", "rush"])
    assert get_pid(server) == server.single_worker()


def test_rush_run_from_python(rush_server: ServerFactory) -> None:
    server = rush_server("", command=[str(PYTHON), "-m", "tests.apps.programmatic", "{fd}"])
    assert get_pid(server) == server.single_worker()
    with server.connect() as connection:
        connection.send(request("GET", "/json"))
        assert connection.read_response().json()["number"] == 1


def test_rush_run_forks_an_app_object_on_purpose_with_preload(rush_server: ServerFactory, tmp_path: Path) -> None:
    """``rush.run(app, workers=2)`` with an app object is refused (each worker
    should import the app itself); ``preload=True`` forks the object on
    purpose, as --preload forks an import: two workers answer, the module
    was imported once."""
    marker = tmp_path / "imports"
    server = rush_server("", command=[str(PYTHON), "-m", "tests.apps.programmatic_preloaded", "{fd}", str(marker)])
    workers = server.wait_for_workers(2)
    answered = wait_for(
        lambda: (pids := {get_pid(server) for _ in range(20)}) == workers and pids,
        "both forked workers answer",
    )
    assert answered == workers
    assert marker.read_text() == "imported\n"


def test_access_log(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--access-log")
    with server.connect() as connection:
        connection.send(request("GET", "/echo?logged=1") + request("GET", "/missing"))
        connection.read_responses(2)
        client = connection.sock.getsockname()
    server.wait_for_log(rf'127\.0\.0\.1:{client[1]} - "GET /echo\?logged=1 HTTP/1\.1" 200 \d+', stream="stdout")
    server.wait_for_log(r'"GET /missing HTTP/1\.1" 404 9', stream="stdout")


def test_no_access_log_by_default(rush_server: ServerFactory) -> None:
    server = rush_server("basic")
    with server.connect() as connection:
        connection.send(request("GET", "/echo?quiet=1"))
        connection.read_response()
    assert server.stop() == 0
    assert "quiet=1" not in server.stdout_text() + server.stderr_text()


def test_log_level_warning_hides_info_lines(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--log-level", "warning")
    get_pid(server)
    assert server.stop() == 0
    assert "[INFO]" not in server.stderr_text()


def test_info_log_names_the_workers(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "--workers", "2")
    workers = server.wait_for_workers(2)

    def logged() -> set[int]:
        return {int(pid) for pid in re.findall(r"started worker (\d+)", server.stderr_text())}

    # A worker can be running before the supervisor's line about it is written.
    wait_for(lambda: len(logged()) >= 2, "a log line for each of the two workers")
    assert logged() == workers


# ---------------------------------------------------------------------------
# The command line

OPTIONS = [
    "host",
    "port",
    "uds",
    "fd",
    "workers",
    "allow-many-workers",
    "backlog",
    "keep-alive-timeout",
    "header-timeout",
    "body-timeout",
    "send-timeout",
    "graceful-timeout",
    "max-body-size",
    "max-spool-size",
    "max-connections",
    "max-request-line",
    "max-head-size",
    "max-headers",
    "access-log",
    "log-level",
]


def test_help_lists_every_option_and_its_environment_variable() -> None:
    result = run_rush("--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())  # undo argparse's line wrapping
    for option in OPTIONS:
        assert f"--{option}" in text
        assert "RUSH_" + option.upper().replace("-", "_") in text


def test_help_shows_only_the_real_defaults() -> None:
    text = " ".join(run_rush("--help").stdout.split())
    assert "(default: None)" not in text
    assert "[default: 8000]" in text


def test_help_prints_sizes_as_the_readme_writes_them() -> None:
    """Issue 33 item 8: 16M, not 16777216."""
    text = " ".join(run_rush("--help").stdout.split())
    assert "16777216" not in text
    for option, default in [("ws-max-size", "16M"), ("max-spool-size", "4G"), ("max-head-size", "16K")]:
        described = text.split(f"--{option} {option.upper().replace('-', '_')} ", 1)[1]
        assert described.split("]", 1)[0].endswith(f"[default: {default}"), described[:300]


def test_version() -> None:
    import rush

    result = run_rush("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"rush {rush.__version__}"


@pytest.mark.parametrize(
    ("app", "message"),
    [
        ("tests.apps.broken:app", r"RuntimeError: tests\.apps\.broken fails to import on purpose"),
        ("tests.apps.not_an_app:app", r"'tests\.apps\.not_an_app:app' is an int, not an application"),
        ("tests.apps.no_such_module:app", r"module 'tests\.apps\.no_such_module' not found"),
        ("tests.apps.basic:no_such_attribute", r"has no attribute 'no_such_attribute'"),
        ("tests.apps.basic", r"MODULE:ATTRIBUTE"),
    ],
)
def test_app_that_cannot_be_loaded_makes_rush_exit_non_zero(app: str, message: str) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        result = subprocess.run(
            [str(RUSH), app, "--fd", str(listener.fileno())],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=GUARD_TIMEOUT,
            env=clean_environment(),
            pass_fds=(listener.fileno(),),
        )
    assert result.returncode != 0
    assert re.search(message, result.stderr), result.stderr
    assert "could not load the application" in result.stderr


def test_no_app_is_a_usage_error() -> None:
    result = run_rush()
    assert result.returncode == 2
    assert "no application given" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "--workers must be between 1 and"),
        (["--port", "http"], "--port"),
        (["--port", "70000"], "port must be between 0 and 65535"),
        (["--max-body-size", "lots"], "--max-body-size"),
        (["--log-level", "chatty"], "--log-level must be critical, error, warning, info or debug"),
        (["--no-such-flag"], "unrecognized arguments"),
    ],
)
def test_invalid_options_are_usage_errors(args: list[str], message: str) -> None:
    result = run_rush("tests.apps.basic:app", *args)
    assert result.returncode == 2
    assert message in result.stderr


def test_invalid_environment_value_is_an_error() -> None:
    result = run_rush("tests.apps.basic:app", env={"RUSH_WORKERS": "many"})
    assert result.returncode != 0
    assert "many" in result.stderr
    assert "Traceback" not in result.stderr


def test_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run_rush("tests.apps.basic:app", "--port", str(taken.getsockname()[1]))
    assert result.returncode == 1
    assert "cannot listen" in result.stderr
