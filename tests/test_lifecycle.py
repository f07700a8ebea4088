"""Development and start-up, over real rush processes: ``--reload`` (a
change restarts the workers, a syntax error keeps the supervisor up and the
next good save serves again), ``--factory`` and the detection of a likely
factory, app-loading errors (one clear line, then the user's own frames
only; no "serving on" banner before the app loaded), ``--app-dir``,
``--chdir``, ``--env-file``, ``--pid``, ``WEB_CONCURRENCY``, ``-w``, ``-b``
(also ``unix:PATH``), a missing ``--static`` directory, warnings for options
that do not apply, and `rush.run` refusing an app object with several workers.

The apps are written by each test into its own directory, served with
``--app-dir`` (or ``--chdir``), so that a test can edit them.
"""

from __future__ import annotations

import re
import socket
import subprocess
import textwrap
from pathlib import Path

import pytest
from support import (
    GUARD_TIMEOUT,
    PYTHON,
    REPO,
    RUSH,
    ServerFactory,
    clean_environment,
    free_port,
    request,
    run_rush,
    run_to_exit,
    wait_for,
)

WSGI_APP = """
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [{body!r}.encode() + b" " + __import__("os").environ.get("GREETING", "-").encode()]
"""


def write_app(directory: Path, body: str, name: str = "app.py") -> Path:
    path = directory / name
    # Written to a temporary name and renamed, as editors do: the worker
    # never imports a half-written file.
    temporary = directory / f".{name}.tmp"
    temporary.write_text(textwrap.dedent(body))
    temporary.rename(path)
    return path


def get(server: object, target: str = "/") -> tuple[int, str]:
    with server.connect() as connection:  # type: ignore[attr-defined]
        connection.send(request("GET", target, [("Connection", "close")]))
        result = connection.read_until_close()
    (response,) = result.responses
    return response.status, response.text


def bound_socket() -> socket.socket:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    return listener


def failing_start(app: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    with bound_socket() as listener:
        return run_to_exit(
            [str(RUSH), app, "--fd", str(listener.fileno()), *args], cwd=cwd, pass_fds=(listener.fileno(),)
        )


# ---------------------------------------------------------------------------
# --reload


def test_reload_restarts_on_change_survives_a_syntax_error_and_serves_the_next_good_save(
    rush_server: ServerFactory, tmp_path: Path
) -> None:
    write_app(tmp_path, WSGI_APP.format(body="one"))
    server = rush_server("app:app", "--app-dir", tmp_path, "--reload", "--reload-dir", tmp_path)
    assert get(server) == (200, "one -")
    first = server.single_worker()

    write_app(tmp_path, WSGI_APP.format(body="two"))
    wait_for(lambda: get(server) == (200, "two -"), "the edited app to be served")
    server.wait_for_log(r"app\.py changed \(--reload\): replacing workers one by one")
    # The new worker answers while the old one still drains: it is gone once its drain ends.
    wait_for(lambda: first not in server.worker_pids(), "the old worker to exit after its drain")

    write_app(tmp_path, WSGI_APP.format(body="three") + "\ndef broken(:\n")
    server.wait_for_log(r"could not load the application: importing module 'app' failed: SyntaxError")
    server.wait_for_log(r"reload aborted, the old workers go on; the next change to a watched file tries again")
    server.assert_running("after a syntax error")
    assert get(server) == (200, "two -")
    assert "def broken(:" in server.stderr_text()  # the error shows the user's line

    write_app(tmp_path, WSGI_APP.format(body="four"))
    wait_for(lambda: get(server) == (200, "four -"), "the fixed app to be served")


@pytest.mark.parametrize("via", ["flag", "env"])
def test_reload_ignores_files_that_do_not_match(rush_server: ServerFactory, tmp_path: Path, via: str) -> None:
    """Excluded and non-matching files change nothing; an included one does."""
    write_app(tmp_path, WSGI_APP.format(body="one"))
    (tmp_path / "templates").mkdir()
    if via == "flag":
        args = ["--reload-include", "*.html", "--reload-include", "*.py", "--reload-exclude", "skip_*.py"]
        server = rush_server("app:app", "--app-dir", tmp_path, "--reload", "--reload-dir", tmp_path, *args)
    else:
        env = {"RUSH_RELOAD_INCLUDE": "*.html,*.py", "RUSH_RELOAD_EXCLUDE": "skip_*.py"}
        args = ["--app-dir", tmp_path, "--reload", "--reload-dir", tmp_path]
        server = rush_server("app:app", *args, env=clean_environment(env))
    worker = server.single_worker()
    (tmp_path / "notes.txt").write_text("not watched")
    (tmp_path / "skip_me.py").write_text("x = 1")
    # A directory created after the start is watched too.
    (tmp_path / "templates" / "new").mkdir()
    server.wait_for_log(r"serving on")
    (tmp_path / "templates" / "new" / "page.html").write_text("<p>")
    server.wait_for_log(r"templates/new/page\.html changed \(--reload\)")
    log = server.stderr_text()
    assert "notes.txt" not in log and "skip_me.py" not in log
    wait_for(lambda: worker not in server.worker_pids(), "the worker to be replaced")


def test_reload_at_start_with_a_broken_app_waits_for_a_fix(rush_server: ServerFactory, tmp_path: Path) -> None:
    write_app(tmp_path, "def app(:\n")
    server = rush_server("app:app", "--app-dir", tmp_path, "--reload", "--reload-dir", tmp_path, wait=False)
    server.wait_for_log(r"could not load the application; waiting for a change to a watched file")
    server.assert_running("with a broken app under --reload")
    assert "serving on" not in server.stderr_text()
    write_app(tmp_path, WSGI_APP.format(body="fixed"))
    server.wait_ready()
    assert get(server) == (200, "fixed -")
    server.wait_for_log(r"serving on http://127\.0\.0\.1:\d+ with 1 worker")


def test_reload_from_the_environment(rush_server: ServerFactory, tmp_path: Path) -> None:
    write_app(tmp_path, WSGI_APP.format(body="one"))
    env = clean_environment({"RUSH_RELOAD": "1", "RUSH_RELOAD_DIR": str(tmp_path), "RUSH_APP_DIR": str(tmp_path)})
    server = rush_server("app:app", env=env)
    write_app(tmp_path, WSGI_APP.format(body="two"))
    wait_for(lambda: get(server) == (200, "two -"), "the edited app to be served")


# ---------------------------------------------------------------------------
# Loading the app: factories and errors

FACTORIES = """
def create_app():
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"made by the factory"]
    return app


def failing_factory():
    return helper()


def helper():
    raise ValueError("the database is not there")
"""


@pytest.mark.parametrize("via", ["flag", "env"])
def test_factory_is_called(rush_server: ServerFactory, tmp_path: Path, via: str) -> None:
    write_app(tmp_path, FACTORIES, "factories.py")
    if via == "flag":
        server = rush_server("factories:create_app", "--factory", "--app-dir", tmp_path)
    else:
        env = clean_environment({"RUSH_FACTORY": "true", "RUSH_APP_DIR": str(tmp_path)})
        server = rush_server("factories:create_app", env=env)
    assert get(server) == (200, "made by the factory")


def test_a_likely_factory_without_the_flag_is_a_clear_error(tmp_path: Path) -> None:
    write_app(tmp_path, FACTORIES, "factories.py")
    result = failing_start("factories:create_app", "--app-dir", str(tmp_path))
    assert result.returncode == 3
    assert re.search(
        r"\[ERROR\] could not load the application: 'factories:create_app' is a function that takes no "
        r"arguments: .* pass --factory",
        result.stderr,
    ), result.stderr
    assert "Traceback" not in result.stderr
    assert "serving on" not in result.stderr


def test_a_failing_factory_shows_only_the_users_frames(tmp_path: Path) -> None:
    write_app(tmp_path, FACTORIES, "factories.py")
    result = failing_start("factories:failing_factory", "--factory", "--app-dir", str(tmp_path))
    assert result.returncode == 3
    lines = result.stderr.splitlines()
    first = next(index for index, line in enumerate(lines) if "could not load the application" in line)
    assert lines[first].endswith(
        "could not load the application: calling the factory 'factories:failing_factory' failed: "
        "ValueError: the database is not there"
    ), result.stderr
    assert lines[first + 1] == "Traceback (most recent call last):"
    frames = [line for line in lines if line.startswith('  File "')]
    assert frames and all(str(tmp_path) in frame for frame in frames), frames
    assert [frame.rpartition(" in ")[2] for frame in frames] == ["failing_factory", "helper"]


@pytest.mark.parametrize(
    ("app", "line"),
    [
        ("tests.apps.no_such_module:app", "module 'tests.apps.no_such_module' not found"),
        ("tests.apps.basic:nothing", "module 'tests.apps.basic' has no attribute 'nothing'"),
        ("tests.apps.not_an_app:app", "'tests.apps.not_an_app:app' is an int, not an application"),
        ("tests.apps.broken:app", "importing module 'tests.apps.broken' failed: RuntimeError: tests.apps.broken"),
    ],
)
def test_loading_errors_say_what_is_wrong_in_one_line_before_any_banner(app: str, line: str) -> None:
    result = failing_start(app)
    assert result.returncode == 3
    errors = [entry for entry in result.stderr.splitlines() if "could not load the application: " in entry]
    assert len(errors) == 1 and line in errors[0], result.stderr
    assert "serving on" not in result.stderr
    frames = [entry for entry in result.stderr.splitlines() if entry.startswith('  File "')]
    assert not [frame for frame in frames if "/rush/" in frame or "importlib" in frame], frames


def test_several_workers_load_a_broken_app_once(tmp_path: Path) -> None:
    """Slot 0's worker loads the app before the others start: one error, not four."""
    result = failing_start("tests.apps.broken:app", "--workers", "4")
    assert result.returncode == 3
    assert result.stderr.count("could not load the application: ") == 1, result.stderr
    assert result.stderr.count("started worker") == 1


def test_the_banner_comes_after_the_app_loaded(rush_server: ServerFactory) -> None:
    server = rush_server("basic", "-w", "2")
    log = server.wait_for_log(r"serving on")[0].string
    assert log.index("started worker") < log.index("serving tests.apps.basic:app") < log.index("serving on")


# ---------------------------------------------------------------------------
# Where the app is, where rush runs, its environment and pid


def test_app_dir_and_chdir(rush_server: ServerFactory, tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    write_app(project, WSGI_APP.format(body="found"), "located.py")
    server = rush_server("located:app", "--app-dir", project)
    assert get(server) == (200, "found -")
    # --chdir: the relative --app-dir and --static are read from there.
    (project / "public").mkdir()
    (project / "public" / "file.txt").write_text("static")
    server = rush_server("located:app", "--chdir", project, "--static", "/s=public")
    assert get(server) == (200, "found -")
    assert get(server, "/s/file.txt") == (200, "static")
    server = rush_server("located:app", "--static", "/s=public", env=clean_environment({"RUSH_CHDIR": str(project)}))
    assert get(server, "/s/file.txt") == (200, "static")


def test_env_file_sets_the_apps_variables_and_rush_options(rush_server: ServerFactory, tmp_path: Path) -> None:
    write_app(tmp_path, WSGI_APP.format(body="env"))
    env_file = tmp_path / "prod.env"
    env_file.write_text(
        "# settings\nexport GREETING='hello world'\nRUSH_WORKERS=2\nRUSH_APP_DIR=" + str(tmp_path) + "  # here\n"
    )
    server = rush_server("app:app", "--env-file", env_file)
    assert get(server) == (200, "env hello world")
    server.wait_for_workers(2)
    # A variable of the real environment wins over the file's.
    server = rush_server("app:app", env=clean_environment({"RUSH_ENV_FILE": str(env_file), "GREETING": "real"}))
    assert get(server) == (200, "env real")


def test_a_bad_env_file_is_a_usage_error(tmp_path: Path) -> None:
    env_file = tmp_path / "bad.env"
    env_file.write_text("GOOD=1\nthis is not a variable\n")
    result = run_rush("tests.apps.basic:app", "--env-file", str(env_file))
    assert result.returncode == 2
    assert result.stderr.startswith(f"rush: error: --env-file cannot be read: {env_file}, line 2: not KEY=VALUE")
    result = run_rush("tests.apps.basic:app", env={"RUSH_ENV_FILE": str(tmp_path / "missing.env")})
    assert result.returncode == 2
    assert result.stderr.startswith("rush: error: --env-file (from RUSH_ENV_FILE) cannot be read")


@pytest.mark.parametrize("via", ["flag", "env"])
def test_pid_file(rush_server: ServerFactory, tmp_path: Path, via: str) -> None:
    pid_file = tmp_path / "rush.pid"
    if via == "flag":
        server = rush_server("basic", "--pid", pid_file)
    else:
        server = rush_server("basic", env=clean_environment({"RUSH_PID": str(pid_file)}))
    assert pid_file.read_text() == f"{server.pid}\n"
    assert server.stop() == 0
    assert not pid_file.exists()


def test_web_concurrency_sets_the_workers_and_loses_to_rush_workers(rush_server: ServerFactory) -> None:
    server = rush_server("basic", env=clean_environment({"WEB_CONCURRENCY": "3"}))
    server.wait_for_workers(3)
    server = rush_server("basic", env=clean_environment({"WEB_CONCURRENCY": "3", "RUSH_WORKERS": "2"}))
    server.wait_for_workers(2)
    result = run_rush("tests.apps.basic:app", env={"WEB_CONCURRENCY": "lots"})
    assert result.returncode == 2
    assert result.stderr.startswith("rush: error: --workers (from WEB_CONCURRENCY) must be a whole number")


@pytest.mark.parametrize("via", ["flag", "env"])
def test_bind_host_port(rush_server: ServerFactory, via: str) -> None:
    port = free_port()
    if via == "flag":
        server = rush_server("basic", "-b", f"127.0.0.1:{port}", "-w", "2", bind="none", wait=False)
    else:
        env = clean_environment({"RUSH_BIND": f"127.0.0.1:{port}"})
        server = rush_server("basic", bind="none", env=env, wait=False)
    server.port = port
    server.wait_ready()
    assert get(server, "/pid")[0] == 200
    server.wait_for_log(rf"serving on http://127\.0\.0\.1:{port} with")


def test_bind_unix_socket(rush_server: ServerFactory, tmp_path: Path) -> None:
    path = tmp_path / "b.sock"
    server = rush_server("basic", "-b", f"unix:{path}", bind="none", wait=False)
    server.bind, server.uds_path = "uds", path
    server.wait_ready()
    assert get(server)[0] == 200
    server.wait_for_log(rf"serving on unix:{re.escape(str(path))}")


@pytest.mark.parametrize("value", ["", "host:port", "[::1", "unix:"])
def test_a_bad_bind_is_a_usage_error(value: str) -> None:
    result = run_rush("tests.apps.basic:app", "-b", value)
    assert result.returncode == 2
    assert result.stderr.startswith("rush: error: --bind takes HOST:PORT, [IPV6]:PORT, unix:PATH or fd://N")


# ---------------------------------------------------------------------------
# Checks and warnings before serving


def test_a_missing_static_directory_is_an_error_before_any_fork(tmp_path: Path) -> None:
    result = run_rush("--static", f"/assets={tmp_path / 'nope'}", "--port", str(free_port()))
    assert result.returncode == 2
    assert result.stderr.startswith("rush: error: --static names a directory that does not exist")
    assert "started worker" not in result.stderr


def test_options_that_do_not_apply_are_warned_about(rush_server: ServerFactory) -> None:
    server = rush_server("asgi_apps", "--threads", "4")
    server.wait_for_log(r"\[WARNING\] --threads 4 is ignored: it runs WSGI apps on a thread pool, and this is an? asgi")
    server = rush_server("wsgi_apps", "--lifespan", "on")
    server.wait_for_log(r"\[WARNING\] --lifespan on is ignored: lifespan events are for ASGI apps, and this is a wsgi")


def test_rush_run_refuses_an_app_object_with_several_workers() -> None:
    script = textwrap.dedent(
        """
        import rush
        app = rush.App()
        try:
            rush.run(app, workers=2, port=0)
        except ValueError as error:
            print(error)
        """
    )
    result = subprocess.run(
        [str(PYTHON), "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=GUARD_TIMEOUT,
        env=clean_environment(),
    )
    assert result.stdout.startswith(
        "--workers needs the application as an import string: rush.run('module:attribute', workers=2)"
    ), result
    assert "started worker" not in result.stderr


def test_short_flags_in_help() -> None:
    result = run_rush("--help")
    assert "-w WORKERS, --workers WORKERS" in result.stdout
    assert "-b ADDRESS, --bind ADDRESS" in result.stdout  # as gunicorn names it
    assert "(env RUSH_WORKERS, or WEB_CONCURRENCY)" in result.stdout


def test_the_reloader_skips_hidden_cache_and_virtualenv_directories(tmp_path: Path) -> None:
    """In-process, with real inotify: what is watched, and a change seen."""
    from rush.reloader import Reloader

    for directory, marker in [(".git", "HEAD"), ("target", "CACHEDIR.TAG"), ("env", "pyvenv.cfg"), ("pkg", None)]:
        (tmp_path / directory).mkdir()
        if marker:
            (tmp_path / directory / marker).write_text("")
    reloader = Reloader([str(tmp_path)], None, None)
    assert len(reloader.watcher) == 2  # tmp_path and pkg
    (tmp_path / "target" / "x.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("")
    changed: list[str] = []
    wait_for(lambda: changed.extend(reloader.changes()) or "pkg/a.py" in changed, "pkg/a.py to be reported")
    assert set(changed) == {"pkg/a.py"}
