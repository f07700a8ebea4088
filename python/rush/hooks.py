"""Server hooks with gunicorn's names and signatures, called at the same
moments of rush's life (the functions come from a ``--config`` file, see
config_file.py; `rush.config.Sources.hooks`).

In the supervisor: ``nworkers_changed(server, new, old)`` (at start, with
``old`` None, and on TTIN/TTOU), ``on_starting(server)`` (before the
addresses are bound), ``when_ready(server)`` (bound, before the first
worker is forked), ``pre_fork(server, worker)``, ``child_exit(server,
worker)`` (a worker was reaped), ``on_reload(server)`` (SIGHUP, before the
first new worker), ``on_exit(server)`` (every worker gone, before rush
exits). In a worker: ``post_fork(server, worker)`` (just forked, before
the app is loaded), ``post_worker_init(worker)`` (the app loaded, an ASGI
lifespan started and the worker's signal handlers set, before it serves),
``worker_int(worker)`` (SIGINT or SIGQUIT), ``worker_abort(worker)``
(found stuck by ``--timeout``, before it is killed: runs only
if the worker's main thread runs Python in the half second before the
SIGKILL), ``worker_exit(server, worker)`` (about to exit).

A hook that raises is logged with its traceback and rush goes on (gunicorn
stops its master for an exception in most of them: see README). The state
is per process: the supervisor sets it up once (`start`), and a forked
worker inherits it with its own `Worker` (`in_worker`).
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable
from typing import Any

from rush import logs
from rush.config import Config
from rush.config_file import import_hook


class Server:
    """What a hook receives as ``server``: the supervisor. ``pid`` its
    process id; ``cfg`` the merged `rush.Config` (rush's option names:
    ``cfg.workers``, ``cfg.bind``, ``cfg.keep_alive_timeout``...); ``log``
    rush's error logger (``server.log.info(...)``); ``num_workers`` the
    worker count asked for (TTIN/TTOU change it); ``workers`` the live
    workers by pid (`Worker`)."""

    def __init__(self, config: Config) -> None:
        self.pid = os.getpid()
        self.cfg = config
        self.log: logging.Logger = logs.error_logger
        self.num_workers = config.workers
        self.workers: dict[int, Worker] = {}


class Worker:
    """What a hook receives as ``worker``. ``pid`` its process id (None in
    ``pre_fork``, which runs before the fork); ``ppid`` the supervisor's;
    ``age`` how many workers the supervisor had started before it, plus
    one (gunicorn's counter); ``slot`` the worker's place, 0 to
    ``num_workers - 1``, which its replacement inherits; ``booted`` whether
    the app is loaded; ``cfg`` and ``log`` as the server's."""

    def __init__(self, server: Server, age: int, slot: int) -> None:
        self.pid: int | None = None
        self.ppid = server.pid
        self.age = age
        self.slot = slot
        self.booted = False
        self.cfg = server.cfg
        self.log = server.log

    def __repr__(self) -> str:
        return f"<rush worker pid={self.pid} slot={self.slot} age={self.age}>"


class _Installed:
    """The hooks of this process: the functions, the server, and in a worker its own `Worker`."""

    def __init__(self, functions: dict[str, Callable[..., Any]], server: Server) -> None:
        self.functions = functions
        self.server = server
        self.worker: Worker | None = None
        self.age = 0


_installed: _Installed | None = None


def has(name: str) -> bool:
    """Whether this process has a ``name`` hook to call."""
    return _installed is not None and name in _installed.functions


def _call(name: str, *arguments: Any) -> None:
    function = _installed.functions.get(name) if _installed is not None else None
    if function is None:
        return
    try:
        function(*arguments)
    except Exception:  # noqa: BLE001 - a hook's failure is logged; the server goes on
        logs.error_logger.error("the %s hook raised (rush goes on):\n%s", name, traceback.format_exc().rstrip())


def start(config: Config) -> Server | None:
    """The supervisor starts: sets up its hooks (importing those a TOML file
    names; `ConfigFileError` if one cannot be) and calls ``nworkers_changed``
    and ``on_starting``. None (and no hook ever called) without hooks."""
    global _installed
    if not config.sources.hooks:
        return None
    functions = {
        name: import_hook(str(config.config), name, hook, config.app_dir) if isinstance(hook, str) else hook
        for name, hook in config.sources.hooks.items()
    }
    server = Server(config)
    _installed = _Installed(functions, server)
    _call("nworkers_changed", server, config.workers, None)
    _call("on_starting", server)
    return server


def ready() -> None:
    if _installed is not None:
        _call("when_ready", _installed.server)


def before_fork(slot: int) -> Worker | None:
    """The supervisor is about to fork a worker for ``slot``: calls ``pre_fork``."""
    if _installed is None:
        return None
    _installed.age += 1
    worker = Worker(_installed.server, _installed.age, slot)
    _call("pre_fork", _installed.server, worker)
    return worker


def forked(worker: Worker | None, pid: int) -> None:
    """In the supervisor, after the fork."""
    if _installed is not None and worker is not None:
        worker.pid = pid
        _installed.server.workers[pid] = worker


def in_worker(worker: Worker | None) -> None:
    """In the new worker, first thing after the fork: calls ``post_fork``."""
    if _installed is None or worker is None:
        return
    worker.pid = os.getpid()
    _installed.worker = worker
    _installed.server.workers.clear()
    _call("post_fork", _installed.server, worker)


def _worker_call(name: str, *before: Any) -> None:
    if _installed is not None and _installed.worker is not None:
        _call(name, *before, _installed.worker)


def worker_initialized() -> None:
    """The worker loaded the app: ``post_worker_init``."""
    if _installed is not None and _installed.worker is not None:
        _installed.worker.booted = True
    _worker_call("post_worker_init")


def worker_interrupted() -> None:
    """The worker got SIGINT or SIGQUIT: ``worker_int``."""
    _worker_call("worker_int")


def worker_aborted() -> None:
    """The worker was found stuck and is about to be killed: ``worker_abort``."""
    _worker_call("worker_abort")


def worker_exiting() -> None:
    """The worker is about to exit: ``worker_exit``."""
    if _installed is None:
        return
    try:
        _worker_call("worker_exit", _installed.server)
    except BaseException:  # noqa: BLE001 - even sys.exit() in the hook: the worker is leaving anyway
        logs.error_logger.error("the worker_exit hook raised:\n%s", traceback.format_exc().rstrip())


def child_exited(pid: int) -> None:
    """The supervisor reaped a worker: ``child_exit``."""
    if _installed is None:
        return
    worker = _installed.server.workers.pop(pid, None)
    if worker is not None:
        _call("child_exit", _installed.server, worker)


def reloading() -> None:
    """SIGHUP: ``on_reload``."""
    if _installed is not None:
        _call("on_reload", _installed.server)


def workers_changed(new: int, old: int) -> None:
    """TTIN or TTOU changed the worker count: ``nworkers_changed``."""
    if _installed is not None:
        _installed.server.num_workers = new
        _call("nworkers_changed", _installed.server, new, old)


def exiting() -> None:
    """The supervisor is about to exit: ``on_exit``."""
    if _installed is not None:
        _call("on_exit", _installed.server)
