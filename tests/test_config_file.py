"""``-c FILE`` / ``--config FILE``: a gunicorn.conf.py, rush.toml or
pyproject.toml's ``[tool.rush]`` read by real rush processes; the server
hooks, recorded by the hooks themselves into a file, in order and in the
right processes; the precedence of the command line, the file, the
environment and the defaults, read back with ``--print-config``.

The oracle is gunicorn itself: the same gunicorn.conf.py (written here in
the shape of gunicorn's example_config.py: bind, workers, log files,
raw_env and every hook) runs under gunicorn and under rush with the same
WSGI app (tests/apps/hooked.py), and the two must bind, serve, log and call
their hooks alike.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from rush.config import Config
from rush.config_file import GUNICORN_SETTINGS, HOOKS, Mapped
from support import (
    RUSH,
    VENV_BIN,
    RushServer,
    ServerFactory,
    clean_environment,
    free_port,
    request,
    run_rush,
    wait_for,
)

# A gunicorn.conf.py as production images carry one: settings by gunicorn's
# names, and every hook rush has a moment for, each appending one JSON line
# (hook, the process it ran in, its parent, the worker's pid) to HOOK_LOG.
GUNICORN_CONF = """
import json
import os

bind = os.environ["CONF_BIND"]
workers = 2
accesslog = os.path.join(os.environ["LOG_DIR"], "access.log")
errorlog = os.path.join(os.environ["LOG_DIR"], "error.log")
loglevel = "info"
raw_env = ["CONF_GREETING=from-raw-env"]
graceful_timeout = 10
timeout = int(os.environ.get("CONF_TIMEOUT", "30"))
pidfile = None
user = None
# gunicorn 27's control socket is one path per user: off, so that tests running side by side do not share it.
control_socket_disable = True


def _record(hook, worker=None, **extra):
    line = {"hook": hook, "pid": os.getpid(), "ppid": os.getppid(), **extra}
    if worker is not None:
        line["worker"] = worker.pid if isinstance(worker.pid, int) else None
    with open(os.environ["HOOK_LOG"], "a") as log:
        log.write(json.dumps(line) + "\\n")


def nworkers_changed(server, new, old):
    _record("nworkers_changed", new=new, old=old)


def on_starting(server):
    _record("on_starting")


def when_ready(server):
    _record("when_ready")


def pre_fork(server, worker):
    _record("pre_fork", worker)


def post_fork(server, worker):
    _record("post_fork", worker)


def post_worker_init(worker):
    _record("post_worker_init", worker)


def worker_int(worker):
    _record("worker_int", worker)


def worker_abort(worker):
    _record("worker_abort", worker)


def worker_exit(server, worker):
    _record("worker_exit", worker)


def child_exit(server, worker):
    _record("child_exit", worker)


def on_reload(server):
    _record("on_reload")


def on_exit(server):
    _record("on_exit")
"""

APP = "tests.apps.hooked:app"


def write_conf(directory: Path, extra: str = "") -> Path:
    path = directory / "gunicorn.conf.py"
    path.write_text(GUNICORN_CONF + textwrap.dedent(extra))
    return path


def hook_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def names(records: list[dict[str, Any]], pid: int) -> list[str]:
    return [record["hook"] for record in records if record["pid"] == pid]


def get(server: RushServer, path: str) -> tuple[int, str]:
    with server.connect() as connection:
        connection.send(request("GET", path, [("Connection", "close")]))
        response = connection.read_until_close().responses[0]
    return response.status, response.text


def start_under(
    factory: ServerFactory, server_name: str, conf: Path, directory: Path, **env: str
) -> tuple[RushServer, Path]:
    """``rush`` or ``gunicorn`` with ``-c conf``, listening where the file's bind says."""
    port = free_port()
    logs = directory / server_name
    logs.mkdir()
    hook_log = logs / "hooks.jsonl"
    executable = RUSH if server_name == "rush" else VENV_BIN / "gunicorn"
    server = RushServer(
        app="",
        args=[],
        command=[str(executable), "-c", str(conf), APP],
        directory=directory,
        name=server_name,
        bind="none",
        port=port,
        env=clean_environment(
            {"CONF_BIND": f"127.0.0.1:{port}", "LOG_DIR": str(logs), "HOOK_LOG": str(hook_log), **env}
        ),
    )
    factory.servers.append(server)
    server.start()
    return server, logs


def wait_until_initialized(hook_log: Path, workers: set[int]) -> None:
    """Until every one of ``workers`` ran post_worker_init: its signal handlers are set (a SIGTERM
    or SIGINT before that ends a worker as it would any process that has not set them)."""
    wait_for(
        lambda: workers <= {r["pid"] for r in hook_records(hook_log) if r["hook"] == "post_worker_init"},
        f"post_worker_init in {workers}",
    )


def check_hook_processes(records: list[dict[str, Any]], supervisor: int) -> set[int]:
    """Each worker hook ran in its worker, a child of the supervisor, and
    names it; returns the workers' pids."""
    workers = {record["pid"] for record in records if record["pid"] != supervisor}
    for record in records:
        if record["pid"] == supervisor:
            assert record["hook"] not in ("post_fork", "post_worker_init", "worker_exit"), record
        else:
            assert record["ppid"] == supervisor, record
            assert record.get("worker") == record["pid"], record
    for record in records:
        if record["hook"] == "child_exit":
            assert record["worker"] in workers, record
    return workers


def run_and_stop(factory: ServerFactory, server_name: str, conf: Path, directory: Path) -> dict[str, Any]:
    """Starts the server with the config, reads what it serves, stops it; returns what was seen."""
    server, logs = start_under(factory, server_name, conf, directory)
    workers = server.wait_for_workers(2)
    wait_until_initialized(logs / "hooks.jsonl", workers)
    greeting = get(server, "/environ/CONF_GREETING")
    answered = {get(server, "/")[0] for _ in range(4)}
    assert server.stop() == 0
    records = hook_records(logs / "hooks.jsonl")
    assert check_hook_processes(records, server.pid) == workers
    access = (logs / "access.log").read_text()
    return {
        "greeting": greeting,
        "answered": answered,
        "supervisor hooks": names(records, server.pid),
        "worker hooks": sorted(tuple(names(records, pid)) for pid in workers),
        "pre_fork knows the pid": any(r.get("worker") for r in records if r["hook"] == "pre_fork"),
        "nworkers_changed": [(r["new"], r["old"]) for r in records if r["hook"] == "nworkers_changed"],
        "access lines": access.count('"GET /environ/CONF_GREETING HTTP/1.1" 200'),
        "error log written": (logs / "error.log").stat().st_size > 0,
        "error log on stderr": "Booting worker" in server.stderr_text() or "serving on" in server.stderr_text(),
    }


def test_a_gunicorn_conf_runs_alike_under_gunicorn_and_rush(rush_server: ServerFactory, tmp_path: Path) -> None:
    conf = write_conf(tmp_path)
    rush_seen = run_and_stop(rush_server, "rush", conf, tmp_path)
    gunicorn_seen = run_and_stop(rush_server, "gunicorn", conf, tmp_path)
    assert rush_seen == gunicorn_seen
    # And what both did, spelled out.
    assert rush_seen["supervisor hooks"] == [
        "nworkers_changed",
        "on_starting",
        "when_ready",
        "pre_fork",
        "pre_fork",
        "child_exit",
        "child_exit",
        "on_exit",
    ]
    assert rush_seen["worker hooks"] == [("post_fork", "post_worker_init", "worker_exit")] * 2
    assert rush_seen["greeting"] == (200, "from-raw-env")
    assert rush_seen["access lines"] == 1 and rush_seen["error log written"]


def test_reload_and_worker_counts_call_their_hooks(rush_server: ServerFactory, tmp_path: Path) -> None:
    conf = write_conf(tmp_path)
    server, logs = start_under(rush_server, "rush", conf, tmp_path)
    first = server.wait_for_workers(2)
    hook_log = logs / "hooks.jsonl"
    server.send_signal(signal.SIGHUP)
    # Both workers replaced: two more post_worker_init, then the old ones gone.
    wait_for(lambda: names(hook_records(hook_log), server.pid).count("child_exit") == 2, "the reload's child_exits")
    server.send_signal(signal.SIGTTIN)
    wait_for(lambda: server.worker_pids() - first and len(server.worker_pids()) == 3, "a third worker")
    wait_for(
        lambda: [r for r in hook_records(hook_log) if r["hook"] == "post_worker_init"][4:], "the third worker's init"
    )
    assert server.stop() == 0
    records = hook_records(hook_log)
    supervisor = names(records, server.pid)
    assert supervisor[supervisor.index("when_ready") + 1 :].count("pre_fork") == 5
    assert supervisor.index("on_reload") < [i for i, n in enumerate(supervisor) if n == "pre_fork"][2]
    assert [(r["new"], r["old"]) for r in records if r["hook"] == "nworkers_changed"] == [(2, None), (3, 2)]
    workers = check_hook_processes(records, server.pid)
    assert len(workers) == 5
    assert supervisor[-1] == "on_exit" and supervisor.count("child_exit") == 5


def test_worker_int_runs_in_the_worker_on_sigint(rush_server: ServerFactory, tmp_path: Path) -> None:
    conf = write_conf(tmp_path)
    server, logs = start_under(rush_server, "rush", conf, tmp_path)
    server.allow_worker_deaths = True  # the interrupted worker exits, and is replaced
    victim = min(server.wait_for_workers(2))
    hook_log = logs / "hooks.jsonl"
    wait_until_initialized(hook_log, {victim})
    os.kill(victim, signal.SIGINT)
    wait_for(lambda: [r for r in hook_records(hook_log) if r["hook"] == "child_exit"], "the worker's exit")
    records = hook_records(hook_log)
    assert names(records, victim) == ["post_fork", "post_worker_init", "worker_int", "worker_exit"]


def test_worker_abort_runs_in_a_stuck_worker_before_it_is_killed(rush_server: ServerFactory, tmp_path: Path) -> None:
    conf = write_conf(tmp_path)
    server, logs = start_under(rush_server, "rush", conf, tmp_path, CONF_TIMEOUT="2")
    server.allow_worker_deaths = True
    server.wait_for_workers(2)
    with server.connect() as connection:
        connection.send(request("GET", "/spin", [("Connection", "close")]))
        wait_for(lambda: "is stuck" in (logs / "error.log").read_text(), "the stuck worker found")
        hook_log = logs / "hooks.jsonl"
        aborted = wait_for(lambda: [r for r in hook_records(hook_log) if r["hook"] == "worker_abort"], "worker_abort")
    (record,) = aborted
    assert record["pid"] == record["worker"] and record["ppid"] == server.pid
    assert "stuck" in (logs / "error.log").read_text()


def test_a_raising_hook_is_logged_and_the_server_serves(rush_server: ServerFactory, tmp_path: Path) -> None:
    conf = write_conf(
        tmp_path,
        """
        def on_starting(server):
            raise RuntimeError("on_starting broke")

        def post_fork(server, worker):
            raise RuntimeError("post_fork broke")
        """,
    )
    server, logs = start_under(rush_server, "rush", conf, tmp_path)
    assert get(server, "/")[0] == 200
    error_log = logs / "error.log"
    # The second worker starts once the first is ready: its hook's failure comes a moment later.
    wait_for(lambda: error_log.read_text().count("RuntimeError: post_fork broke") == 2, "both post_fork failures")
    errors = error_log.read_text()
    assert "the on_starting hook raised (rush goes on):\nTraceback" in errors
    assert 'raise RuntimeError("on_starting broke")' in errors
    assert errors.count("the post_fork hook raised (rush goes on)") == 2
    assert all(status == 200 for status, _ in (get(server, "/") for _ in range(4)))


def print_config(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_rush(*args, "--print-config", env=env)


def origins(output: str) -> dict[str, str]:
    found = {}
    for line in output.splitlines():
        if line.startswith("#"):
            continue
        name, _, rest = line.partition(" = ")
        found[name] = rest.rpartition("  # ")[2]
    return found


def test_precedence_is_command_line_then_file_then_environment_then_default(tmp_path: Path) -> None:
    conf = tmp_path / "gunicorn.conf.py"
    conf.write_text("workers = 3\nkeepalive = 7\nmax_requests = 50\nbind = '127.0.0.1:9999'\n")
    env = {
        "RUSH_WORKERS": "5",
        "RUSH_KEEP_ALIVE_TIMEOUT": "9",
        "RUSH_BACKLOG": "100",
        "WEB_CONCURRENCY": "6",
        "RUSH_PORT": "7000",
    }
    result = print_config(APP, "-c", str(conf), "--max-requests", "20", env=env)
    assert result.returncode == 0, result.stderr
    settings = tomllib.loads(result.stdout)
    assert (settings["max_requests"], settings["workers"], settings["keep_alive_timeout"]) == (20, 3, 7)
    assert (settings["backlog"], settings["header_timeout"]) == (100, 10.0)
    # The file's bind replaces RUSH_PORT (an address from the environment).
    assert settings["bind"] == ["127.0.0.1:9999"] and settings["port"] == 8000
    where = origins(result.stdout)
    assert where["max_requests"] == "command line"
    assert where["workers"] == f"file {conf}: workers"
    assert where["keep_alive_timeout"] == f"file {conf}: keepalive"
    assert where["backlog"] == "env RUSH_BACKLOG"
    assert where["header_timeout"] == "default"
    # RUSH_CONFIG names the file too; the command line's --fd replaces its bind.
    result = print_config(APP, "--fd", "3", env={**env, "RUSH_CONFIG": str(conf)})
    settings, where = tomllib.loads(result.stdout), origins(result.stdout)
    assert settings["fd"] == 3 and "bind" not in settings and settings["workers"] == 3
    assert where["config"] == "env RUSH_CONFIG"


def test_an_unknown_setting_is_warned_about_once(rush_server: ServerFactory, tmp_path: Path) -> None:
    conf = write_conf(tmp_path, "from os import environ\nstatsd_host = 'localhost:8125'\nworker = 4\nspew = True\n")
    server, logs = start_under(rush_server, "rush", conf, tmp_path)
    server.wait_for_workers(2)
    server.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload finished" in (logs / "error.log").read_text(), "the reload's end")
    assert server.stop() == 0
    errors = (logs / "error.log").read_text()
    assert errors.count("statsd_host: ignored, rush has no such setting: rush serves Prometheus metrics") == 1
    assert errors.count("worker: is not a setting of gunicorn or rush; ignored") == 1
    assert errors.count("spew: not applied: rush has no tracing of every line run") == 1
    assert errors.count("WARNING") == 3  # and nothing on the imports, the helpers, the hooks
    # --print-config shows them too.
    result = print_config(APP, "-c", str(conf), env={"CONF_BIND": "127.0.0.1:1", "LOG_DIR": str(tmp_path)})
    assert result.returncode == 0
    assert sum("statsd_host" in line for line in result.stderr.splitlines()) == 1


def test_the_defaults_an_example_config_spells_out_raise_no_warning(tmp_path: Path) -> None:
    """gunicorn's example_config.py writes many settings at their defaults
    (a file of the same shape, written here): only what rush cannot do is warned about."""
    conf = tmp_path / "example.conf.py"
    conf.write_text(
        textwrap.dedent(
            """
            bind = "127.0.0.1:8000"
            backlog = 2048
            workers = 1
            worker_class = "sync"
            worker_connections = 1000
            timeout = 30
            keepalive = 2
            spew = False
            daemon = False
            raw_env = ["SPAM=eggs"]
            pidfile = None
            umask = 0
            user = None
            group = None
            tmp_upload_dir = None
            errorlog = "-"
            loglevel = "info"
            accesslog = "-"
            access_log_format = '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"'
            proc_name = None

            def post_fork(server, worker):
                server.log.info("Worker spawned (pid: %s)", worker.pid)

            def pre_exec(server):
                server.log.info("Forked child, re-executing.")
            """
        )
    )
    result = print_config(APP, "-c", str(conf))
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"rush: warning: {conf}: pre_exec: rush never calls this hook: rush never re-executes itself "
        "(it has no USR2 binary upgrade)"
    ]
    settings = tomllib.loads(result.stdout)
    assert (settings["max_connections"], settings["keep_alive_timeout"], settings["access_log"]) == (1000, 2, True)
    assert (settings["threads"], settings["timeout"], settings["env"]) == (0, 30, ["SPAM=***"])


def test_toml_and_pyproject_use_rush_names(rush_server: ServerFactory, tmp_path: Path) -> None:
    (tmp_path / "toml_hooks.py").write_text(
        "import os\n\ndef on_starting(server):\n"
        "    open(os.environ['HOOK_LOG'], 'a').write(f'on_starting {server.pid} {server.cfg.workers}\\n')\n"
    )
    hook_log = tmp_path / "hooks.txt"
    rush_toml = tmp_path / "rush.toml"
    port = free_port()
    rush_toml.write_text(
        f'bind = ["127.0.0.1:{port}"]\nworkers = 2\nmax-body-size = "1K"\nenv = ["CONF_GREETING=toml"]\n'
        'on_starting = "toml_hooks:on_starting"\nkeepalive = 3\n'
    )
    server = rush_server(
        APP,
        "-c",
        str(rush_toml),
        bind="none",
        port=port,
        env=clean_environment({"HOOK_LOG": str(hook_log), "PYTHONPATH": str(tmp_path)}),
    )
    server.wait_for_workers(2)
    assert get(server, "/environ/CONF_GREETING") == (200, "toml")
    with server.connect() as connection:
        connection.send(request("POST", "/", [("Connection", "close")], b"x" * 2000))
        assert connection.read_until_close().responses[0].status == 413
    assert hook_log.read_text() == f"on_starting {server.pid} 2\n"
    assert "keepalive: is gunicorn's name; a TOML file takes rush's (keep-alive-timeout); ignored" in (
        server.stderr_text()
    )
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\n\n[tool.rush]\nworkers = 4\nlog-level = "debug"\n')
    settings = tomllib.loads(print_config(APP, "-c", str(pyproject), "-e", "SECRET=hunter2").stdout)
    assert (settings["workers"], settings["log_level"]) == (4, "debug")
    assert settings["env"] == ["SECRET=***"]
    pyproject.write_text('[project]\nname = "x"\n')
    result = print_config(APP, "-c", str(pyproject))
    assert result.returncode == 2
    assert result.stderr == f"rush: error: config file {pyproject} has no [tool.rush] table\n"


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "gunicorn.conf.py",
            "workers = 'many'\n",
            "--workers (from {path}: workers) must be a whole number (got 'many')",
        ),
        (
            "gunicorn.conf.py",
            "keepalive = -1\n",
            "--keep-alive-timeout (from {path}: keepalive) must be a finite number of seconds between 0 and 86400 "
            "(got -1)",
        ),
        ("gunicorn.conf.py", "post_fork = 3\n", "{path}: post_fork must be a function (a server hook), not 3"),
        ("gunicorn.conf.py", "workers = (\n", "config file {path}, line 1 failed: SyntaxError: '(' was never closed"),
        ("gunicorn.conf.py", "import nowhere_at_all\n", "config file {path}, line 1 failed: ModuleNotFoundError: "),
        ("rush.toml", "workers = true\n", "--workers (from {path}: workers) must be a whole number (got True)"),
        ("rush.toml", "max-body-size = 'lots'\n", "--max-body-size (from {path}: max-body-size) must be a size"),
        ("rush.toml", "workers = [\n", "config file {path} cannot be read: "),
        ("rush.toml", "on_exit = 'no_such_module:f'\n", "{path}: on_exit = 'no_such_module:f' cannot be imported"),
    ],
)
def test_a_bad_value_is_an_error_naming_the_file_and_the_setting(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    result = run_rush(APP, "-c", path, "--port", "0")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("rush: error: " + message.format(path=path)), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    result = print_config(APP, "-c", str(tmp_path / "nowhere.py"))
    assert result.returncode == 2
    assert result.stderr == f"rush: error: config file {tmp_path / 'nowhere.py'} does not exist\n"


def test_every_gunicorn_setting_and_hook_has_a_row() -> None:
    """The table covers the installed gunicorn's settings, and each row that
    maps to rush names an option rush has (or one other helpers add)."""
    from gunicorn.config import KNOWN_SETTINGS

    options = {option.name for option in Config.settable_fields()}
    for setting in KNOWN_SETTINGS:
        assert setting.name in GUNICORN_SETTINGS or setting.name in HOOKS, setting.name
    for name, row in GUNICORN_SETTINGS.items():
        if isinstance(row, Mapped):
            assert row.rush in options or row.rush in ("preload", "proxy_protocol"), name


@pytest.mark.parametrize(
    ("given", "applied"), [("'v1'", "true"), ("'v2'", "true"), ("'auto'", "true"), ("'off'", "false"), ("True", "true")]
)
def test_gunicorns_proxy_protocol_values_turn_rushs_on_or_off(tmp_path: Path, given: str, applied: str) -> None:
    """gunicorn names a version (off, v1, v2, auto); rush reads v1 and v2
    alike once --proxy-protocol is on."""
    conf = tmp_path / "gunicorn.conf.py"
    conf.write_text(f"proxy_protocol = {given}\n")
    done = print_config("-c", str(conf), "tests.apps.basic:app")
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("proxy_protocol = ")]
    assert line.startswith(f"proxy_protocol = {applied}  # file "), line
    assert line.endswith("gunicorn.conf.py: proxy_protocol"), line


def test_gunicorns_preload_app_is_rushs_preload(tmp_path: Path) -> None:
    conf = tmp_path / "gunicorn.conf.py"
    conf.write_text("preload_app = True\n")
    done = print_config("-c", str(conf), "tests.apps.basic:app")
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("preload = ")]
    assert line.startswith("preload = true  # file "), line
    assert "no --preload" not in done.stderr
