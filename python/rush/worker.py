"""One worker process: load the app, build the native loop, serve until told to stop.

A worker is forked by the supervisor with its slot's listening sockets
inherited, one per address: its slot's own, or one all workers share (see
supervisor.py). Its native loop accepts on every one of them.
It serves in one of two modes:

* **native** (no ``async def`` handler): the Rust loop runs by itself in
  ``Server.serve``, releasing the GIL only while it waits in epoll. Signals
  wake it through a wake-up fd registered in its epoll set; the Python
  signal handler only sets a flag that the loop checks.
* **asyncio** (some handler is ``async def``): an asyncio loop (uvloop when
  installed) owns the thread, and the native loop's epoll fd is registered
  with it as a reader. Both loops share one thread, so a coroutine that
  suspends resumes on the same thread that owns its connection.
"""

from __future__ import annotations

import asyncio
import atexit
import faulthandler
import inspect
import logging
import math
import os
import resource
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from typing import Any

from rush import hooks, logs, preload
from rush._rush import (
    AppServerSettings,
    AppSettings,
    ForwardingSettings,
    HeaderSettings,
    Http3Settings,
    LimitSettings,
    Liveness,
    LogSettings,
    ProxySettings,
    Router,
    Server,
    StopHandle,
    TimeoutSettings,
    WebSocketSettings,
)
from rush.app import App
from rush.cache import worker_cache
from rush.cache_shared import app_namespace, set_default_namespace
from rush.config import Config
from rush.coroutines import CoroutineRunner
from rush.lifespan import Lifespan
from rush.loading import AppLoadError
from rush.threads import BlockingPool

# The supervisor stops instead of respawning when a worker exits with this:
# the app could not be loaded, so a new worker would fail the same way.
EXIT_BOOT_FAILURE = 3
# The supervisor SIGKILLs a stopping worker --graceful-timeout after it sent
# SIGTERM, and the worker's own count starts later: the lifespan shutdown ends
# this much earlier (at most a tenth of the timeout), so a hung one is
# cancelled (its `finally` blocks run), logged and left by the worker itself.
LIFESPAN_KILL_MARGIN = 0.25
# On this signal a worker prints every thread's stack (faulthandler); the
# supervisor sends it to a stuck worker (--timeout) before killing it.
DUMP_SIGNAL = signal.SIGUSR1


def raise_open_file_limit() -> None:
    """Lets a worker hold as many connections as the hard limit allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def detect_interface(app: Any, requested: str) -> str:
    """Which protocol ``app`` speaks: a rush `App`, an ASGI 3 app (an async
    callable), or a WSGI app (any other callable)."""
    if requested != "auto":
        return requested
    if isinstance(app, App):
        return "rush"
    if not callable(app):
        raise TypeError(f"the application is a {type(app).__name__}, which is not callable")
    call = app if inspect.isfunction(app) or inspect.ismethod(app) else type(app).__call__
    if inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(app):
        return "asgi"
    return "wsgi"


def log_settings(config: Config) -> LogSettings:
    """Where the native loop's log lines go, and which it writes (both kinds of worker)."""
    return LogSettings(
        logs.log_handler_error,
        access_logger=logs.log_access if config.access_log else None,
        access_log_format=config.access_log_format,
        access_log_fields=config.log_format == "json",
        log_refusals=logs.error_logger.isEnabledFor(logging.WARNING),
        debug=logs.error_logger.isEnabledFor(logging.DEBUG),
    )


def app_server_settings(config: Config, router: Router, **app: Any) -> AppServerSettings:
    """What makes a worker an app server: the app (``app`` holds its interface's
    own arguments: ``wsgi_app=``, or ``asgi_app=`` and ``asgi_state=``) and the
    options of the connections it serves, all taken from ``config``."""
    return AppServerSettings(
        AppSettings(
            router,
            root_path=config.root_path,
            wsgi_multithread=app.pop("wsgi_multithread", False),
            wsgi_multiprocess=app.pop("wsgi_multiprocess", False),
            **app,
        ),
        limits=LimitSettings(
            max_request_line=config.max_request_line,
            max_head_size=config.max_head_size,
            max_headers=config.max_headers,
            # 0 is no limit: the core counts against the largest size it can.
            max_body_size=config.max_body_size or 2**64 - 1,
            max_spool_size=config.max_spool_size,
            max_connections=config.max_connections,
            max_worker_output=config.max_worker_output,
            tls_max_handshakes=config.ssl_max_handshakes,
        ),
        timeouts=TimeoutSettings(
            keep_alive_timeout=config.keep_alive_timeout,
            header_timeout=config.header_timeout,
            body_timeout=config.body_timeout,
            send_timeout=config.send_timeout,
        ),
        headers=HeaderSettings(
            forwarding=ForwardingSettings(
                proxy_headers=config.proxy_headers,
                forwarded_allow_ips=config.forwarded_allow_ips,
                forwarded_host=config.forwarded_host,
                proxy_protocol=config.proxy_protocol,
            ),
            server_header=config.server_header,
            date_header=config.date_header,
            extra_headers=config.header_pairs(),
        ),
        websocket=WebSocketSettings(
            max_size=config.ws_max_size,
            max_queue=config.ws_max_queue,
            ping_interval=config.ws_ping_interval,
            ping_timeout=config.ws_ping_timeout,
            per_message_deflate=config.ws_per_message_deflate,
            allowed_origins=list(config.ws_allowed_origins or []),
        ),
        tls=config.tls_settings(),
        http=config.http,
        http3=_http3_settings(config),
    )


def _http3_settings(config: Config) -> Http3Settings | None:
    """``--http3``'s settings: the secret the supervisor drew (rush.tls), shared by every worker."""
    if not config.http3:
        return None
    from rush import tls

    return Http3Settings(tls.quic_secret)


def build_server(
    config: Config,
    listeners: list[socket.socket],
    serves: AppServerSettings | ProxySettings,
    wakeup_fd: int | None,
) -> Server:
    """The native server, listening on its own duplicates of the ``listeners'`` fds:
    an app server or a forward proxy, as ``serves`` says.
    The ``listeners`` are closed once the server has its copies: when the server lets go
    of the sockets on shutdown, this worker holds no other copy that would keep
    them listening (and queueing connections nobody accepts) until the process exits."""
    server = Server(
        [(listener.fileno(), listener.family == socket.AF_UNIX) for listener in listeners],
        serves,
        log_settings(config),
        wakeup_fd=wakeup_fd,
    )
    for listener in listeners:
        listener.close()
    return server


def run_worker(
    config: Config, listeners: list[socket.socket], ready_fd: int | None, liveness: Liveness | None = None
) -> int:
    """Runs one app server worker to completion; returns its exit code."""
    logs.configure_from(config)
    # Where a stuck worker is stuck (--timeout): the supervisor sends this
    # signal before SIGKILL, and faulthandler prints every thread's stack
    # from its C-level handler, which runs even while a handler holds the GIL.
    if hooks.has("worker_abort"):
        # The hook runs from Python's handler, chained after faulthandler's
        # dump: only if this thread gets back to Python before the SIGKILL.
        signal.signal(DUMP_SIGNAL, lambda signum, frame: hooks.worker_aborted())
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True, chain=hooks.has("worker_abort"))
    try:
        app = preload.app_for_worker(config)  # --preload: imported before the fork
        interface = detect_interface(app, config.interface)
        if interface == "rush" and not isinstance(app, App):
            raise TypeError(f"--interface rush needs a rush.App, not a {type(app).__name__}")
        # WSGI and ASGI apps are served behind an empty router that holds
        # only the --static mounts (those are answered first, natively).
        if isinstance(config.app, str):
            namespace = app_namespace(config.app, config.app.partition(":")[0], config.app_dir)
        else:  # rush.run(app): the script that made it
            namespace = app_namespace(type(app).__name__, "__main__", config.app_dir)
        set_default_namespace(namespace)
        rush_app = app if interface == "rush" else App()
        for prefix, directory in config.static_mounts():
            rush_app.static(prefix, directory, cache=config.static_cache, cache_control=config.static_cache_control)
        router = rush_app.build_router()
        add_cached_paths(config, router, interface)
    except AppLoadError as error:
        # One line saying what is wrong, then the user's own frames only, in one record (one
        # write), so that the supervisor's lines cannot land between the two.
        details = f"\n{error.details.rstrip()}" if error.details else ""
        logs.error_logger.error("could not load the application: %s%s", error, details)
        return EXIT_BOOT_FAILURE
    except Exception:  # noqa: BLE001 - whatever a broken app raises is reported, then the worker exits
        logs.error_logger.error("could not load the application:\n%s", traceback.format_exc())
        return EXIT_BOOT_FAILURE
    described = config.app if isinstance(config.app, str) else type(app).__name__
    kind = {"wsgi": "a WSGI", "asgi": "an ASGI"}.get(interface, f"a {interface}")
    logs.error_logger.info("worker %d serving %s as %s app", os.getpid(), described, kind)
    warn_about_options_that_do_not_apply(config, interface)
    raise_open_file_limit()
    if interface == "wsgi":
        serve_native(
            config,
            listeners,
            router,
            ready_fd,
            liveness,
            wsgi_app=app,
            wsgi_multithread=config.threads > 0,
            wsgi_multiprocess=config.workers > 1,
        )
    elif interface == "asgi":
        return serve_with_asyncio(config, listeners, router, ready_fd, liveness, asgi_app=app)
    elif router.needs_asyncio:
        return serve_with_asyncio(config, listeners, router, ready_fd, liveness)
    else:
        serve_native(config, listeners, router, ready_fd, liveness)
    return 0


def warn_about_options_that_do_not_apply(config: Config, interface: str) -> None:
    """Options of one interface given to another are ignored: say so, rather
    than let the user believe they took effect."""
    if config.threads > 0 and interface != "wsgi":
        logs.error_logger.warning(
            "--threads %d is ignored: it runs WSGI apps on a thread pool, and this is a %s app",
            config.threads,
            interface,
        )
    if config.lifespan != "auto" and interface != "asgi":
        logs.error_logger.warning(
            "--lifespan %s is ignored: lifespan events are for ASGI apps, and this is a %s app",
            config.lifespan,
            interface,
        )


def add_cached_paths(config: Config, router: Router, interface: str) -> None:
    """The ``--cache`` paths of a WSGI/ASGI app, on its router; `worker_cache`
    reaches the worker's cache whatever the interface."""
    cached = config.cached_paths()
    if cached and interface == "rush":
        raise ValueError("--cache is for WSGI and ASGI apps; a rush App passes cache=Cache(...) to its routes")
    if cached:
        router.set_cache_size(max(policy.max_bytes_value for _, policy in cached))
    for path, policy in cached:
        router.add_cached_path(path, policy.native(), policy.shared_level())
    worker_cache.attach(router)


def notify_ready(ready_fd: int | None) -> None:
    if ready_fd is None:
        return
    try:
        os.write(ready_fd, b"R")
    except BrokenPipeError:
        # The supervisor stopped waiting: it retired this worker before it was
        # ready (SIGTTOU, a reload), and its SIGTERM ends the worker cleanly.
        # Raising here made the worker exit 1 with a traceback instead.
        pass
    finally:
        os.close(ready_fd)


def serve_native(
    config: Config,
    listeners: list[socket.socket],
    router: Router,
    ready_fd: int | None,
    liveness: Liveness | None,
    **app: Any,
) -> None:
    pools: list[BlockingPool] = []

    def build(wakeup_fd: int) -> Server:
        server = build_server(config, listeners, app_server_settings(config, router, **app), wakeup_fd)
        if app.get("wsgi_app") is not None and config.threads > 0:
            pools.append(BlockingPool(config.threads))
            server.set_blocking_scheduler(pools[0].schedule_wsgi)
            server.set_completion_source(pools[0].reader, pools[0].drain)
        if liveness is not None:
            server.set_liveness(liveness)
        return server

    serve_native_loop(config, ready_fd, build)
    for pool in pools:
        pool.shutdown()


def serve_native_loop(config: Config, ready_fd: int | None, build: Callable[[int], Server]) -> None:
    """Runs the native loop alone until a graceful stop: signals set a stop
    flag that the loop sees through a wake-up fd in its epoll set. ``build``
    makes the server, given that fd (the server loop, or the proxy's)."""
    stop = StopHandle()
    wakeup_reader, wakeup_writer = socket.socketpair()
    wakeup_reader.setblocking(False)
    wakeup_writer.setblocking(False)
    signal.set_wakeup_fd(wakeup_writer.fileno(), warn_on_full_buffer=False)

    def request_stop(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT:
            hooks.worker_interrupted()
        stop.set()

    def quit_now(signum: int, frame: Any) -> None:
        hooks.worker_interrupted()
        os._exit(0)

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGQUIT, quit_now)
    server = build(wakeup_reader.fileno())
    # As in gunicorn, post_worker_init runs with the worker's signal handlers in place.
    hooks.worker_initialized()
    notify_ready(ready_fd)
    server.serve(stop, config.graceful_timeout)
    signal.set_wakeup_fd(-1)


def new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def serve_with_asyncio(
    config: Config,
    listeners: list[socket.socket],
    router: Router,
    ready_fd: int | None,
    liveness: Liveness | None,
    asgi_app: Any = None,
) -> int:
    """Serves with an asyncio loop owning the thread; returns the exit code."""
    loop = new_event_loop()
    asyncio.set_event_loop(loop)
    lifespan = Lifespan(asgi_app, config.lifespan) if asgi_app is not None else None
    try:
        if lifespan is not None and not loop.run_until_complete(lifespan.startup()):
            return EXIT_BOOT_FAILURE
        app_options: dict[str, Any] = {}
        if asgi_app is not None:
            # Every scope gets a copy of the state, empty when the app has no lifespan (as uvicorn does).
            app_options = {"asgi_app": asgi_app, "asgi_state": lifespan.state}
        server = build_server(config, listeners, app_server_settings(config, router, **app_options), None)
        runner = CoroutineRunner(loop, server.complete)
        server.set_async_scheduler(runner)
        # A suspended ASGI app's messages are written from the loop's own turn
        # (call_soon), never from inside the app's send() call.
        server.set_asgi_notifier(lambda key, request_id: partial(loop.call_soon, server.flush_asgi, key, request_id))
        # WebSockets batch their flushes: one call_soon per loop turn, however many connections sent.
        server.set_websocket_notifier(partial(loop.call_soon, server.flush_websockets))
        if liveness is not None:
            server.set_liveness(liveness)
        stop_requested = loop.run_until_complete(_serve_until_drained(server, config, loop, ready_fd))
        if lifespan is not None:
            # --graceful-timeout counts from the stop signal, as the
            # supervisor's SIGKILL does: the shutdown gets what is left of it.
            margin = min(LIFESPAN_KILL_MARGIN, config.graceful_timeout / 10)
            left = max(config.graceful_timeout - (time.monotonic() - stop_requested) - margin, 0.0)
            loop.run_until_complete(lifespan.shutdown(left))
        return 0
    finally:
        _cancel_remaining_tasks(loop)
        loop.close()


async def _serve_until_drained(
    server: Server, config: Config, loop: asyncio.AbstractEventLoop, ready_fd: int | None
) -> float:
    """Serves until a requested stop has drained; returns when the stop was requested."""
    stopping = asyncio.Event()
    requested = [math.inf]

    def request_stop() -> None:
        if not stopping.is_set():
            requested[0] = time.monotonic()
        server.begin_shutdown(config.graceful_timeout)
        stopping.set()

    def interrupted() -> None:
        hooks.worker_interrupted()
        request_stop()

    def quit_now() -> None:
        hooks.worker_interrupted()
        os._exit(0)

    loop.add_signal_handler(signal.SIGTERM, request_stop)
    loop.add_signal_handler(signal.SIGINT, interrupted)
    loop.add_signal_handler(signal.SIGQUIT, quit_now)
    loop.add_reader(server.fileno(), server.poll)
    hooks.worker_initialized()
    notify_ready(ready_fd)
    # tick() checks deadlines once a second, and returns True once a
    # requested shutdown has drained. What it leaves to do (a parked request
    # released, a request found on an idle connection) is driven by a poll()
    # outside this task: a handler's coroutine cannot start inside it.
    while not server.tick():
        loop.call_soon(server.poll)
        if stopping.is_set():
            await asyncio.sleep(0.05)
            continue
        try:
            await asyncio.wait_for(stopping.wait(), 1.0)
        except TimeoutError:
            pass
    loop.remove_reader(server.fileno())
    return min(requested[0], time.monotonic())


def _cancel_remaining_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def worker_main(
    config: Config,
    listeners: list[socket.socket],
    ready_fd: int | None,
    liveness: Liveness | None = None,
    body: Callable[..., int] | None = None,
) -> None:
    """Entry point in the forked child; never returns. ``body`` runs the
    worker (`run_worker`, the app server's, unless the caller picked
    another: a ``rush proxy`` worker's, proxy_worker.py)."""
    code = 1
    try:
        code = (body or run_worker)(config, listeners, ready_fd, liveness)
        # os._exit skips atexit hooks, the only shutdown hook a WSGI app has:
        # run them after a normal stop (the stack above is the supervisor's,
        # forked, so the worker cannot simply return through it).
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - the child must exit, whatever happened
        traceback.print_exc()
    finally:
        hooks.worker_exiting()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
