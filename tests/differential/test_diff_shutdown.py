"""What an app and its clients see when the server stops or reloads gracefully: rush against
uvicorn and gunicorn.

One scene (`stop_scene`) is set up under each server with the same app (apps/shutdown_app.py),
then the server gets SIGTERM or SIGINT by PID:

* an idle keep-alive connection (one request answered on it before the stop);
* an in-flight request held in its handler by a gate, with a second request pipelined behind it;
* a StreamingResponse that has sent its first piece and waits at a gate for its second;
* a Starlette BackgroundTask waiting at a gate after its response went out;
* a task the handler started with ``asyncio.create_task``, never released;
* an open WebSocket.

Once the server has begun its stop (the app's WebSocket handler saw the disconnect), the test
reads what the idle connection got, releases the gates, and reads everything else to its end.
What the clients saw, the marker files the app wrote (did the work finish, did ``finally`` run, what
did the WebSocket's ``receive()`` return), the order of the lifespan shutdown against the requests
(from the recorder's event log) and the exit code are compared with `Pair.compare`.
The same scene runs through a reload (SIGHUP) against gunicorn with uvicorn's worker class. The
other tests: `--graceful-timeout` running out with work still gated (`overdue_scene`), lifespan
shutdowns that raise, fail or hang (apps/shutdown_lifespan.py; uvicorn never ends a hung one, so
that case is a test of rush alone), and a WSGI generator mid-stream through SIGTERM, SIGHUP and
``--max-requests`` against gunicorn (apps/shutdown_wsgi.py).
No sleeps: marker files and log lines are waited for with `wait_for`; the graceful timeouts are
small so the file runs in about 20 s.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
from typing import Any

import httpx
import pytest
from harness import Pair, Side, error_lines, read_all, read_until, start_pair, websocket_url
from support import ServerFactory, clean_environment, request, wait_for
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

# Small, so a test that hits it stays short; the gates are released long before it.
GRACE = "5"


def shutdown_pair(factory: ServerFactory) -> Pair:
    return start_pair(
        factory,
        "shutdown_app",
        "asgi",
        rush_args=["--graceful-timeout", GRACE],
        reference_args=["--timeout-graceful-shutdown", GRACE],
    )


def close_view(result: Any) -> dict:
    """What a raw connection got until the server closed it: each response's status, body and
    whether it announced the close, then how the connection ended."""
    return {
        "responses": [
            {"status": response.status, "body": response.body.decode(), "connection-close": response.closes}
            for response in result.responses
        ],
        "leftover": result.leftover.decode("latin-1"),
        "reset": result.reset,
    }


def lifespan_after_requests(side: Side) -> bool:
    """Whether the app got ``lifespan.shutdown`` only after every request's app call had ended
    (the recorder's event log is in the order things happened)."""
    requests_open = set()
    for line in side.record_path.read_text().splitlines():
        record = json.loads(line)
        tag, event = record["tag"], record["event"]
        if tag == "lifespan":
            if event.get("receive", {}).get("type") == "lifespan.shutdown":
                return not requests_open
        elif "scope" in event:
            requests_open.add(tag)
        elif "return" in event or "raise" in event:
            requests_open.discard(tag)
    raise AssertionError(f"{side.name} never sent lifespan.shutdown")


def stop_scene(side: Side, signum: int) -> dict:
    with contextlib.ExitStack() as stack:
        return stop_scene_in(side, signum, stack)


def stop_scene_in(side: Side, signum: int, stack: contextlib.ExitStack) -> dict:
    directory = side.record_path.parent / f"markers-{side.name}-{signum}"
    directory.mkdir()
    query = f"?dir={directory}"

    def entered(name: str) -> None:
        wait_for((directory / f"{name}.entered").exists, f"{name} to start under {side.name}")

    idle = stack.enter_context(side.connect())
    idle.send(request("GET", "/hello"))
    assert idle.read_response().status == 200
    in_flight = stack.enter_context(side.connect())
    in_flight.send(request("GET", "/slow" + query) + request("GET", "/hello"))
    streaming = stack.enter_context(side.connect())
    streaming.send(request("GET", "/stream" + query))
    read_until(streaming, b"first\n")
    assert httpx.get(side.url + "/background" + query).text == "queued"
    assert httpx.get(side.url + "/detached" + query).text == "started"
    websocket = stack.enter_context(connect(websocket_url(side, "/ws" + query)))
    assert websocket.recv(timeout=15) == "hello"
    for name in ("slow", "stream", "background", "detached", "ws"):
        entered(name)

    old_workers = side.server.worker_pids()
    side.server.send_signal(signum)
    # Both servers close open WebSockets as the first step of their stop, in the process that
    # serves: the app's receive() returning is the marker that the drain has begun. (A refused
    # connection is not: uvicorn keeps the --fd socket it inherited open until it exits.)
    wait_for((directory / "ws.received").exists, f"{side.name} to begin its stop")
    idle_view = close_view(idle.read_until_close())
    for name in ("slow", "stream", "background"):
        (directory / f"{name}.release").touch()
    in_flight_view = close_view(in_flight.read_until_close())
    stream_raw = read_all(streaming).decode("latin-1")
    try:
        websocket.recv(timeout=15)
        websocket_view: dict = {"closed": False}
    except ConnectionClosed as closed:
        frame = closed.rcvd
        websocket_view = {"code": frame and frame.code, "reason": frame and frame.reason}
    if signum == signal.SIGHUP:
        # A reload: the old worker finishes and exits, and a new one serves.
        wait_for(lambda: not old_workers & side.server.worker_pids(), f"{side.name}'s old worker to exit")
        ending = {"after-reload": httpx.get(side.url + "/hello").text}
    else:
        ending = {"exit-code": side.server.wait_exit()}
    markers = {
        path.name: path.read_text()
        for path in sorted(directory.iterdir())
        if path.suffix not in (".entered", ".release")
    }
    return {
        "idle": idle_view,
        "in-flight": in_flight_view,
        # The head carries a Date: only the body's bytes, chunk framing included, compare.
        "stream": stream_raw.partition("\r\n\r\n")[2],
        "websocket": websocket_view,
        "app": {"markers": markers, "lifespan-after-requests": lifespan_after_requests(side)},
        **ending,
    }


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
def test_graceful_stop_with_work_in_flight(rush_server: ServerFactory, signum: int) -> None:
    pair = shutdown_pair(rush_server)
    rush_view, _ = pair.check(f"stop-{signal.Signals(signum).name.lower()}", lambda side: stop_scene(side, signum))
    # Whatever the reference does, rush answers the request it had started and finishes the work
    # it had accepted.
    assert rush_view["in-flight"]["responses"][0]["body"] == "slow done"
    assert "background.done" in rush_view["app"]["markers"]


def test_reload_with_work_in_flight(rush_server: ServerFactory) -> None:
    """The same scene through a reload (SIGHUP), against gunicorn running uvicorn's worker class
    (plain uvicorn has no reload signal): the old worker drains while a new one serves."""
    pair = start_pair(
        rush_server,
        "shutdown_app",
        "asgi",
        rush_args=["--graceful-timeout", GRACE],
        reference_args=["--worker-class", "uvicorn.workers.UvicornWorker", "--graceful-timeout", GRACE],
        reference="gunicorn",
    )
    rush_view, _ = pair.check("reload-sighup", lambda side: stop_scene(side, signal.SIGHUP))
    assert rush_view["in-flight"]["responses"][0]["body"] == "slow done"
    assert rush_view["websocket"]["code"] == 1012


def overdue_scene(side: Side) -> dict:
    """Work that never ends: what each side does when --graceful-timeout runs out."""
    directory = side.record_path.parent / f"overdue-{side.name}"
    directory.mkdir()
    query = f"?dir={directory}"
    with side.connect() as in_flight, side.connect() as streaming:
        in_flight.send(request("GET", "/slow" + query))
        streaming.send(request("GET", "/stream" + query))
        read_until(streaming, b"first\n")
        assert httpx.get(side.url + "/background" + query).text == "queued"
        for name in ("slow", "stream", "background"):
            wait_for((directory / f"{name}.entered").exists, f"{name} to start under {side.name}")
        side.server.send_signal(signal.SIGTERM)
        in_flight_view = close_view(in_flight.read_until_close())
        stream_raw = read_all(streaming).decode("latin-1")
        exit_code = side.server.wait_exit()
    markers = {path.name for path in directory.iterdir() if path.suffix != ".entered"}
    # A stream cut at the deadline: rush cancels its task before the worker
    # exits, and the generator's `finally` runs when the cancellation gets
    # there before the exit does, which is a race; uvicorn dies of the
    # signal with the generator suspended, and never runs it. Not compared.
    markers.discard("stream.finally")
    return {
        "in-flight": in_flight_view,
        "stream": stream_raw.partition("\r\n\r\n")[2],
        "app": {
            "markers": sorted(markers),
            "slow": [e for e in side.events("/slow") if "raise" in e or "return" in e],
            "lifespan-after-requests": lifespan_after_requests(side),
        },
        "exit-code": exit_code,
    }


def test_graceful_timeout_runs_out(rush_server: ServerFactory) -> None:
    pair = start_pair(
        rush_server,
        "shutdown_app",
        "asgi",
        rush_args=["--graceful-timeout", "1"],
        reference_args=["--timeout-graceful-shutdown", "1"],
    )
    pair.check("overdue", overdue_scene)


@pytest.mark.parametrize("mode", ["raise", "failed"])
def test_lifespan_shutdown_that_goes_wrong(rush_server: ServerFactory, mode: str) -> None:
    """The stop itself: the lifespan conversation the app had, the exit code and whether an error
    was logged, when the app's shutdown raises or answers ``lifespan.shutdown.failed``."""
    pair = start_pair(
        rush_server,
        "shutdown_lifespan",
        "asgi",
        rush_args=["--graceful-timeout", "1"],
        reference_args=["--timeout-graceful-shutdown", "1"],
        env={"SHUTDOWN_MODE": mode},
    )

    def script(side: Side) -> dict:
        assert httpx.get(side.url + "/").text == "ok"
        exit_code = side.server.stop()
        return {"lifespan": side.events("lifespan"), "exit-code": exit_code, "logged-error": bool(error_lines(side))}

    pair.check(f"lifespan-{mode}", script)


def test_lifespan_shutdown_that_hangs_is_ended_by_the_graceful_timeout(rush_server: ServerFactory) -> None:
    """An app whose lifespan shutdown never answers. uvicorn (0.3x) waits for it without a limit:
    its --timeout-graceful-shutdown covers the connections only, so the process never exits on
    SIGTERM and needs a SIGKILL (not comparable with the harness: the reference does not end).
    rush gives the lifespan shutdown what is left of --graceful-timeout, then cancels it (so its
    ``finally`` runs), logs it and exits, before the supervisor's SIGKILL for the same deadline: a
    deploy or a scale-down must not hang on one app's cleanup, and the operator set the bound."""
    marker = rush_server.directory / "lifespan-finally"
    server = rush_server(
        "tests.differential.apps.shutdown_lifespan:app",
        "--graceful-timeout",
        "1",
        env=clean_environment({"SHUTDOWN_MODE": "hang", "SHUTDOWN_MARKER": str(marker)}),
    )
    assert httpx.get(server.url + "/").text == "ok"
    assert server.stop() == 0
    log = server.stderr_text()
    assert re.search(r"lifespan shutdown did not finish within", log), server.describe()
    assert "killing it" not in log, server.describe()
    assert marker.read_text() == "finally ran"


# What each server logs when it starts acting on the signal (the stream's head and first piece are
# out already, so how soon after it the worker itself hears of it changes nothing the test sees).
SIGNAL_SEEN = {
    ("rush", signal.SIGTERM): r"received SIGTERM",
    ("rush", signal.SIGHUP): r"retiring worker \d+",
    ("gunicorn", signal.SIGTERM): r"Handling signal: term",
    ("gunicorn", signal.SIGHUP): r"Booting worker with pid: \d+[\s\S]*Booting worker with pid",
}


def wsgi_stream_scene(side: Side, how: str) -> dict:
    directory = side.record_path.parent / f"wsgi-{side.name}-{how}"
    directory.mkdir()
    if how == "max-requests":
        # The readiness probe was the first request: the stream is the worker's last.
        worker = side.server.single_worker()
    with side.connect() as streaming:
        streaming.send(request("GET", f"/stream?dir={directory}"))
        read_until(streaming, b"first\n")
        wait_for((directory / "stream.entered").exists, f"the stream to start under {side.name}")
        if how != "max-requests":
            signum = signal.SIGTERM if how == "sigterm" else signal.SIGHUP
            side.server.send_signal(signum)
            side.server.wait_for_log(SIGNAL_SEEN[side.name, signum])
        (directory / "stream.release").touch()
        raw = read_all(streaming).decode("latin-1")
    view: dict[str, Any] = {
        "stream": raw.partition("\r\n\r\n")[2],
        "closed": wait_for((directory / "stream.closed").exists, f"close() under {side.name}"),
    }
    if how == "max-requests":
        wait_for(lambda: worker not in side.server.worker_pids(), f"{side.name}'s worker to be replaced")
    if how != "sigterm":
        # The server went on serving: a new request is answered (by the new worker).
        view["after"] = httpx.get(side.url + "/").text
    else:
        view["exit-code"] = side.server.wait_exit()
    return view


@pytest.mark.parametrize("how", ["sigterm", "sighup", "max-requests"])
def test_wsgi_stream_through_stop_and_reload(rush_server: ServerFactory, how: str) -> None:
    """A WSGI generator mid-stream when the server stops (SIGTERM), reloads (SIGHUP) or replaces
    the worker at --max-requests: the stream must end whole, chunked terminator included, and the
    server must call the body's close()."""
    limits = ["--max-requests", "2"] if how == "max-requests" else []
    pair = start_pair(
        rush_server,
        "shutdown_wsgi",
        "wsgi",
        rush_args=["--graceful-timeout", GRACE, *limits],
        reference_args=["--graceful-timeout", GRACE, *limits],
    )
    rush_view, _ = pair.check(f"wsgi-{how}", lambda side: wsgi_stream_scene(side, how))
    assert rush_view["stream"].endswith("0\r\n\r\n")
