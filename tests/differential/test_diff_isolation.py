"""Differential tests of request isolation: nothing one request does may reach another.

Each test runs the same client script against rush and against a reference
server that gives every request a clean start, and compares what the app
reported. The apps (apps/isolation_asgi.py, isolation_wsgi.py,
isolation_app.py for a rush App, isolation_fastapi.py, isolation_django.py)
answer with what a request found when it started, then leave marks of their
own (a ContextVar set, the task renamed, keys added to the scope, the state,
the environ, Django's active language), so the answer of a *later* request
shows whether a mark crossed over. The same requests go pipelined, over
keep-alive, on separate connections, as HTTP/2 streams and as WebSockets.

Which oracle, and why:

* hypercorn runs every ASGI request as a task of its own, each in a clean
  copy of the server's context, for pipelined HTTP/1.1 and HTTP/2 streams
  alike. uvicorn does too, except that a pipelined request starts in the
  previous one's context there (a ContextVar or the decimal precision set by
  the first is seen by the second): uvicorn is the oracle only elsewhere.
* gunicorn is the oracle for WSGI: its sync worker (one thread, as rush's
  loop thread) and its gthread worker (a pool, as rush's ``--threads``).
* A rush ``App`` runs only under rush: its oracle is the same request alone,
  the first one on a fresh server.

Several of these failed on rush before the fixes that came with them
(requests started in a copy of whatever context was current; plain App
handlers and plain ASGI callables ran in the worker's own context; requests
that finish at once ran as one shared asyncio task); the commits that fixed
them name the tests. The keep-alive and HTTP/2-upload forms were races,
failing in some runs only.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Sequence
from typing import Any

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
from harness import ReferenceServer
from support import RUSH, VENV_BIN, RushServer, ServerFactory, clean_environment, request
from websockets.sync.client import connect

ASGI_APP = "tests.differential.apps.isolation_asgi:app"
APP_APP = "tests.differential.apps.isolation_app:app"

Answers = list[Any]


def start_server(factory: ServerFactory, kind: str, target: str, *extra: str) -> RushServer:
    """``target`` under rush or a reference server (one worker, on a socket the test bound)."""
    if kind == "rush":
        # A rush App is recognised as one; the others are named.
        interface = [] if target == APP_APP else ["--interface", "wsgi" if "wsgi" in target else "asgi"]
        command = [str(RUSH), target, "--workers", "1", *interface, "--fd", "{fd}", *extra]
    elif kind == "uvicorn":
        command = [str(VENV_BIN / "uvicorn"), target, "--http", "httptools", "--loop", "uvloop", "--fd", "{fd}"]
        command += ["--interface", "asgi3"]
    elif kind == "hypercorn":
        command = [str(VENV_BIN / "hypercorn"), "--workers", "0", "--bind", "fd://{fd}", target]
    else:
        command = [str(VENV_BIN / "gunicorn"), target, "--workers", "1", "-b", "fd://{fd}", *extra]
    server = (RushServer if kind == "rush" else ReferenceServer)(
        app="",
        args=[],
        command=command,
        directory=factory.directory,
        name=f"isolation-{kind}-{len(factory.servers)}",
        env=clean_environment(),
    )
    factory.servers.append(server)
    return server.start()


@pytest.fixture(scope="module")
def rush(module_servers: ServerFactory) -> RushServer:
    return start_server(module_servers, "rush", ASGI_APP)


@pytest.fixture(scope="module")
def uvicorn(module_servers: ServerFactory) -> RushServer:
    return start_server(module_servers, "uvicorn", ASGI_APP)


@pytest.fixture(scope="module")
def hypercorn(module_servers: ServerFactory) -> RushServer:
    return start_server(module_servers, "hypercorn", ASGI_APP)


# ---------------------------------------------------------------------------
# Clients: the same requests sent in different ways


def get(target: str) -> bytes:
    return request("GET", target)


def pipelined(server: RushServer, targets: Sequence[str]) -> Answers:
    """All requests on one connection in one write, then all answers read."""
    with server.connect() as connection:
        connection.send(b"".join(get(target) for target in targets))
        return [response.json() for response in connection.read_responses(len(targets))]


def keep_alive(server: RushServer, targets: Sequence[str]) -> Answers:
    """All requests on one connection, each sent once the previous one is answered."""
    answers = []
    with server.connect() as connection:
        for target in targets:
            connection.send(get(target))
            answers.append(connection.read_response().json())
    return answers


def separate(server: RushServer, targets: Sequence[str]) -> Answers:
    """Each request on a connection of its own, one after the other."""
    answers = []
    for target in targets:
        with server.connect() as connection:
            connection.send(request("GET", target, [("Connection", "close")]))
            answers.append(connection.read_response().json())
    return answers


def h2_sequential(server: RushServer, targets: Sequence[str]) -> Answers:
    """HTTP/2 (prior knowledge over cleartext), each stream opened once the previous one is answered."""
    with httpx.Client(http1=False, http2=True, base_url=server.url, timeout=15) as client:
        answers = []
        for target in targets:
            response = client.get(target)
            assert response.http_version == "HTTP/2", response
            answers.append(response.json())
        return answers


def h2_request_fields(method: str, target: str) -> list[tuple[str, str]]:
    return [(":method", method), (":scheme", "http"), (":authority", "127.0.0.1"), (":path", target)]


def h2_receive(
    connection: h2.connection.H2Connection, sock: socket.socket, bodies: dict[int, bytes], ended: set[int]
) -> bool:
    """Reads once and hands it to ``connection``: each stream's DATA is added to ``bodies`` (and
    acknowledged, so the windows stay open), each stream that ends to ``ended``. True once every
    stream of ``bodies`` has ended."""
    data = sock.recv(65536)
    assert data, f"the server closed the connection with streams {set(bodies) - ended} open"
    for event in connection.receive_data(data):
        if isinstance(event, h2.events.DataReceived):
            bodies[event.stream_id] += event.data
            connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            ended.add(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            raise AssertionError(f"stream {event.stream_id} reset: {event.error_code!r}")
    sock.sendall(connection.data_to_send())
    return ended >= set(bodies)


def h2_together(server: RushServer, targets: Sequence[str]) -> Answers:
    """HTTP/2: every stream's HEADERS in one write, then every answer read (in stream order)."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    with socket.create_connection(server.address, timeout=15) as sock:
        connection.initiate_connection()
        streams = []
        for target in targets:
            stream = connection.get_next_available_stream_id()
            connection.send_headers(stream, h2_request_fields("GET", target), end_stream=True)
            streams.append(stream)
        sock.sendall(connection.data_to_send())
        bodies: dict[int, bytes] = dict.fromkeys(streams, b"")
        ended: set[int] = set()
        while not h2_receive(connection, sock, bodies, ended):
            pass
        return [json.loads(bodies[stream]) for stream in streams]


def h2_upload_then_get(server: RushServer, targets: Sequence[str], size: int = 3 << 20) -> Answers:
    """HTTP/2: a POST to ``targets[0]`` with a ``size``-byte body (sent as fast as the windows let
    it, so the server's reading pauses at its 1 MiB of unread body and goes on as the app drains
    it), and a GET of ``targets[1]`` opened on the same connection right behind the body's end."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    upload, follower = 1, 3
    body = b"x" * size
    with socket.create_connection(server.address, timeout=15) as sock:
        connection.initiate_connection()
        connection.send_headers(upload, [*h2_request_fields("POST", targets[0]), ("content-length", str(size))])
        sent, bodies, ended = 0, {upload: b"", follower: b""}, set()
        while True:
            if sent < size:
                room = min(connection.local_flow_control_window(upload), connection.max_outbound_frame_size)
                while room > 0 and sent < size:
                    piece = body[sent : sent + room]
                    sent += len(piece)
                    connection.send_data(upload, piece, end_stream=sent == size)
                    room = min(connection.local_flow_control_window(upload), connection.max_outbound_frame_size)
                if sent == size:
                    connection.send_headers(follower, h2_request_fields("GET", targets[1]), end_stream=True)
            sock.sendall(connection.data_to_send())
            if h2_receive(connection, sock, bodies, ended):
                return [json.loads(bodies[upload]), json.loads(bodies[follower])]


Client = Callable[[RushServer, Sequence[str]], Answers]
HTTP1_CLIENTS = {"pipelined": pipelined, "keep-alive": keep_alive, "separate": separate}
H2_CLIENTS = {"h2-sequential": h2_sequential, "h2-together": h2_together}


def same_answers(rush: RushServer, oracle: RushServer, client: Client, targets: Sequence[str] = ()) -> Answers:
    """Runs ``targets`` through ``client`` (or any script taking a server and ``targets``) on both
    servers; fails unless rush's answers equal the oracle's."""
    ours, theirs = client(rush, targets), client(oracle, targets)
    assert ours == theirs, f"rush answered {ours}\noracle answered {theirs}"
    return ours


# ---------------------------------------------------------------------------
# ContextVars between ASGI requests

CLEAN = {"request_var": "unset", "lifespan_var": "unset", "module_var": "module"}


CONTEXT_CASES = [
    pytest.param(client_name, suspend, id=f"{client_name}-{'suspending' if suspend else 'at-once'}")
    for client_name in [*HTTP1_CLIENTS, *H2_CLIENTS]
    for suspend in (0, 1)
]


@pytest.mark.parametrize(("client_name", "suspend"), CONTEXT_CASES)
def test_a_context_var_set_by_a_request_is_its_own(
    rush: RushServer, hypercorn: RushServer, client_name: str, suspend: int
) -> None:
    """A ContextVar one request sets (before answering at once, or before suspending) is not seen
    by the next request, on the same connection or the next. Oracle: hypercorn, which starts each
    request as a task of its own in a clean context copy (uvicorn leaks in the pipelined case, so
    it cannot be the oracle here)."""
    client = {**HTTP1_CLIENTS, **H2_CLIENTS}[client_name]
    answers = same_answers(rush, hypercorn, client, [f"/ctx?set=first&suspend={suspend}", "/ctx"])
    assert answers == [CLEAN, CLEAN], answers


def test_a_request_whose_body_arrives_late_leaves_no_context_behind(rush: RushServer, hypercorn: RushServer) -> None:
    """The first request sets the ContextVar, then waits in ``receive()`` for a body the client
    sends only after the server's 100 Continue (so ``receive()`` really suspends); the next
    request, pipelined behind the body, must start clean. Oracle: hypercorn, as above."""

    def script(server: RushServer) -> Answers:
        with server.connect() as connection:
            head = request("POST", "/ctx?set=first&body=1", [("Expect", "100-continue"), ("Content-Length", "5")])
            connection.send(head)
            (interim,) = connection.read_responses(1)
            assert interim.status == 100, interim
            connection.send(b"hello" + get("/ctx"))
            return [response.json() for response in connection.read_responses(2)]

    ours, theirs = script(rush), script(hypercorn)
    assert ours == theirs, f"rush answered {ours}\nhypercorn answered {theirs}"
    assert ours == [{**CLEAN, "body_length": 5}, CLEAN], ours


def test_an_http2_stream_behind_a_large_upload_starts_clean(rush: RushServer, hypercorn: RushServer) -> None:
    """Stream 1 sets the ContextVar, then reads a 3 MiB body: rush stops reading the connection at
    1 MiB unread and reads on when the app drains it (a drive scheduled from the app's side, as
    the flush the pipelined leak goes through is), and stream 3's HEADERS come right behind the
    body, so that drive may be what reads them. Stream 3 must start clean. Oracle: hypercorn."""
    answers = same_answers(rush, hypercorn, h2_upload_then_get, ["/ctx?set=first&body=1", "/ctx"])
    assert answers == [{**CLEAN, "body_length": 3 << 20}, CLEAN], answers


@pytest.mark.parametrize("protocol", ["http1", "h2"])
def test_a_request_released_by_a_cache_fill_starts_clean(
    module_servers: ServerFactory, hypercorn: RushServer, protocol: str
) -> None:
    """With ``--cache`` on ``/ctx``, two requests ask for the same key at once: the first calls
    the app, which sets the ContextVar and waits for a ``/release``; the second waits for that
    fill (single flight). The answer says ``no-store``, so once it is out the waiter is released
    to the app itself, which must start clean. Over HTTP/1.1 the two go on connections of their
    own, then the release on a third; over HTTP/2 all three are streams of one write. Oracle:
    hypercorn (no cache: both requests call the app, each in its own clean context)."""
    cached = start_server(module_servers, "rush", ASGI_APP, "--cache", "/ctx:ttl=60")
    target = f"/ctx?set=first&hold-once={protocol}&no-store=1"

    def script(server: RushServer, _: object) -> Answers:
        if protocol == "h2":
            return h2_together(server, [target, target, "/release"])[:2]
        with server.connect() as first, server.connect() as second, server.connect() as releaser:
            # Each connection answered once, so the server has taken all three in before the race.
            for connection in (first, second, releaser):
                connection.send(get("/"))
                connection.read_response()
            first.send(get(target))
            second.send(get(target))
            releaser.send(get("/release"))
            return [first.read_response().json(), second.read_response().json()]

    answers = same_answers(cached, hypercorn, script)
    assert answers == [CLEAN, CLEAN], answers


def test_a_context_var_set_in_lifespan_startup_is_not_seen_by_requests(rush: RushServer, uvicorn: RushServer) -> None:
    """uvicorn runs the lifespan in a task of its own: a ContextVar its startup sets stays there,
    while one set at import (module level) is seen by every request. Oracle: uvicorn (hypercorn
    agrees)."""
    answers = same_answers(rush, uvicorn, separate, ["/ctx"])
    assert answers == [CLEAN], answers


@pytest.mark.parametrize("client_name", ["keep-alive", "separate"])
def test_a_context_var_set_by_a_plain_asgi_callable_is_its_requests_own(
    module_servers: ServerFactory, client_name: str
) -> None:
    """An ASGI app that is a plain function returning a coroutine sets the ContextVar before the
    coroutine runs: the next request, on the same connection or another, must not see it.
    Oracle: uvicorn, which calls the app (the plain part too) inside the request's own task."""
    target = ASGI_APP.replace(":app", ":plain_entry")
    rush, uvicorn = (start_server(module_servers, kind, target) for kind in ("rush", "uvicorn"))
    answers = same_answers(rush, uvicorn, HTTP1_CLIENTS[client_name], ["/ctx?entry=first", "/ctx"])
    assert answers[1] == CLEAN, answers


@pytest.mark.parametrize("client_name", ["pipelined", "separate", "h2-together"])
def test_a_decimal_context_change_stays_with_its_request(
    rush: RushServer, hypercorn: RushServer, client_name: str
) -> None:
    """``decimal.getcontext()`` lives in a ContextVar: a request that lowers its precision leaves
    the next request's at the default 28. Oracle: hypercorn (uvicorn leaks it when pipelined)."""
    client = {**HTTP1_CLIENTS, **H2_CLIENTS}[client_name]
    answers = same_answers(rush, hypercorn, client, ["/decimal?set=5", "/decimal"])
    assert answers == [{"precision": 28}] * 2, answers


@pytest.mark.parametrize("client_name", ["keep-alive", "separate"])
def test_an_exception_does_not_outlive_its_request(rush: RushServer, hypercorn: RushServer, client_name: str) -> None:
    """After a request whose app raised (a 500), the next request's app is not running inside the
    handling of that exception (``sys.exc_info()`` is empty). Oracle: hypercorn (which closes the
    connection after its 500: the next request then goes on a new one; rush keeps it)."""

    def script(server: RushServer, _: object) -> Answers:
        with server.connect() as connection:
            connection.send(request("GET", "/raise", [("Connection", "close")] if client_name == "separate" else []))
            failed = connection.read_response()
            if client_name == "keep-alive" and not failed.closes:
                connection.send(get("/exception"))
                return [failed.status, connection.read_response().json()]
        return [failed.status, *separate(server, ["/exception"])]

    answers = same_answers(rush, hypercorn, script)
    assert answers == [500, {"handling": "None"}], answers


# ---------------------------------------------------------------------------
# The asyncio task a request runs as


@pytest.mark.parametrize("client_name", [*HTTP1_CLIENTS, *H2_CLIENTS])
def test_each_request_runs_as_a_task_of_its_own(rush: RushServer, hypercorn: RushServer, client_name: str) -> None:
    """The second request must not run as the first one's task, nor find the name the first gave
    its task. Oracle: hypercorn (uvicorn too), which creates one task per request."""
    client = {**HTTP1_CLIENTS, **H2_CLIENTS}[client_name]
    answers = same_answers(rush, hypercorn, client, ["/task?name=first", "/task"])
    fresh = {"previous_requests_task": False, "name_was_set_by_a_request": False, "same_task_after_suspending": True}
    assert answers == [fresh, fresh], answers


@pytest.mark.parametrize("client_name", [*HTTP1_CLIENTS, *H2_CLIENTS])
def test_a_task_an_earlier_request_kept_is_not_the_next_ones(
    rush: RushServer, hypercorn: RushServer, client_name: str
) -> None:
    """A request keeps a strong reference to its task (as SQLAlchemy's
    ``async_scoped_session(scopefunc=current_task)`` does in its registry) and answers at once:
    the next request must not run as that task. Oracle: hypercorn."""
    client = {**HTTP1_CLIENTS, **H2_CLIENTS}[client_name]
    answers = same_answers(rush, hypercorn, client, ["/kept-task", "/kept-task"])
    assert answers == [{"kept_by_an_earlier_request": False}] * 2, answers


@pytest.mark.parametrize("client_name", [*HTTP1_CLIENTS, *H2_CLIENTS])
def test_a_request_is_the_same_task_before_and_after_suspending(
    rush: RushServer, hypercorn: RushServer, client_name: str
) -> None:
    """``asyncio.current_task()`` after an await is the task the request started as (anyio's
    cancel scopes depend on it); a request that suspended is never the next one's task. Oracle:
    hypercorn."""
    client = {**HTTP1_CLIENTS, **H2_CLIENTS}[client_name]

    def script(server: RushServer) -> Answers:
        # What the first request finds depends on the tests before: not compared.
        first, second = client(server, ["/task?suspend=1", "/task?suspend=1"])
        return [first["same_task_after_suspending"], second]

    answers = same_answers(rush, hypercorn, lambda server, _: script(server))
    assert answers == [
        True,
        {"previous_requests_task": False, "name_was_set_by_a_request": False, "same_task_after_suspending": True},
    ], answers


def test_concurrent_requests_are_different_tasks(rush: RushServer, hypercorn: RushServer) -> None:
    """``/hold`` waits until ``/release`` (on another connection) runs: neither runs as the other's
    task. Oracle: hypercorn."""

    def script(server: RushServer) -> Answers:
        with server.connect() as holder, server.connect() as releaser:
            holder.send(get("/hold"))
            releaser.send(get("/release"))
            return [releaser.read_response().json(), holder.read_response().json()]

    ours, theirs = script(rush), script(hypercorn)
    assert ours == theirs, f"rush answered {ours}\nhypercorn answered {theirs}"
    assert ours == [{"holders_task": False}, {"released_by_own_task": False}], ours


def test_concurrent_http2_streams_are_different_tasks(rush: RushServer, hypercorn: RushServer) -> None:
    """The same over two streams of one HTTP/2 connection. Oracle: hypercorn."""
    answers = same_answers(rush, hypercorn, h2_together, ["/hold", "/release"])
    assert answers == [{"released_by_own_task": False}, {"holders_task": False}], answers


# ---------------------------------------------------------------------------
# The scope: what one request changes in its own must not reach the next

FIRST_SCOPE = {
    "key": False,
    "header": False,
    "extension": False,
    "extension_value": False,
    "state": False,
    "state_started": True,
    "server": False,
    "client": False,
    "subprotocols": False,
}


@pytest.mark.parametrize("client_name", HTTP1_CLIENTS)
def test_changes_to_a_scope_stay_in_it(rush: RushServer, uvicorn: RushServer, client_name: str) -> None:
    """A request adds a key to its scope, a header to ``scope["headers"]``, keys to
    ``scope["extensions"]`` and to the dicts in it, and a key to ``scope["state"]``: the next
    request sees none of them, and still sees what the lifespan startup put into the state.
    Oracle: uvicorn, which builds each scope anew and gives each request a shallow copy of the
    lifespan state."""
    answers = same_answers(rush, uvicorn, HTTP1_CLIENTS[client_name], ["/scope", "/scope"])
    assert answers == [FIRST_SCOPE, FIRST_SCOPE], answers


@pytest.mark.parametrize("client_name", H2_CLIENTS)
def test_changes_to_an_http2_scope_stay_in_it(rush: RushServer, hypercorn: RushServer, client_name: str) -> None:
    """The same over HTTP/2 streams. Oracle: hypercorn (uvicorn has no HTTP/2)."""
    answers = same_answers(rush, hypercorn, H2_CLIENTS[client_name], ["/scope", "/scope"])
    assert answers == [FIRST_SCOPE, FIRST_SCOPE], answers


@pytest.mark.parametrize("client_name", ["pipelined", "keep-alive"])
def test_an_unread_body_does_not_reach_the_next_request(
    rush: RushServer, hypercorn: RushServer, client_name: str
) -> None:
    """The first request answers without reading its body; the second, on the same connection,
    reads its own and gets exactly that. (Closing the connection after the first answer would be
    correct too; both servers answer both today, and the test holds rush to that.) Oracle:
    hypercorn."""
    first = request("POST", "/ignore-body", body=b"first body")
    second = request("POST", "/body", body=b"second")

    def script(server: RushServer, _: object) -> Answers:
        with server.connect() as connection:
            if client_name == "pipelined":
                connection.send(first + second)
                return [response.json() for response in connection.read_responses(2)]
            connection.send(first)
            answer = connection.read_response().json()
            connection.send(second)
            return [answer, connection.read_response().json()]

    answers = same_answers(rush, hypercorn, script)
    assert answers == [{"ignored": True}, {"body": "second"}], answers


# ---------------------------------------------------------------------------
# WebSocket connections


def websocket_answers(server: RushServer, queries: Sequence[str]) -> Answers:
    """One WebSocket connection per query, one after the other; each one's report."""
    answers = []
    for query in queries:
        with connect(f"ws://127.0.0.1:{server.port}/ws{query}", open_timeout=15, close_timeout=15) as websocket:
            answers.append(json.loads(websocket.recv(timeout=15)))
    return answers


def test_a_websocket_connection_starts_clean(rush: RushServer, uvicorn: RushServer) -> None:
    """A WebSocket app sets the ContextVar and marks its scope (state included): the next WebSocket
    connection finds neither. Oracle: uvicorn (a task per connection, a scope and state copy
    each)."""
    ours, theirs = websocket_answers(rush, ["?set=first", ""]), websocket_answers(uvicorn, ["?set=first", ""])
    assert ours == theirs, f"rush answered {ours}\nuvicorn answered {theirs}"
    clean = {**CLEAN, **{f"scope.{key}": value for key, value in FIRST_SCOPE.items()}}
    assert ours == [clean, clean], ours


# ---------------------------------------------------------------------------
# FastAPI: sync endpoints, dependencies with yield, background tasks

FASTAPI_APP = "tests.differential.apps.isolation_fastapi:app"


def rush_and_hypercorn(factory: ServerFactory, target: str) -> tuple[RushServer, RushServer]:
    return start_server(factory, "rush", target), start_server(factory, "hypercorn", target)


@pytest.fixture(scope="module")
def fastapi_servers(module_servers: ServerFactory) -> tuple[RushServer, RushServer]:
    return rush_and_hypercorn(module_servers, FASTAPI_APP)


FASTAPI_CASES = [
    pytest.param(endpoint, client_name, id=f"{endpoint}-{client_name}")
    for endpoint in ("sync", "async", "background")
    for client_name in ("pipelined", "keep-alive", "separate", "h2-together")
]


@pytest.mark.parametrize(("endpoint", "client_name"), FASTAPI_CASES)
def test_a_fastapi_request_starts_clean(
    fastapi_servers: tuple[RushServer, RushServer], endpoint: str, client_name: str
) -> None:
    """A FastAPI request sets the ContextVar in a dependency with ``yield`` (before a plain
    endpoint on a thread, or an async one that suspends) or in a background task: the next
    request finds it unset. Oracle: hypercorn, a task per request in a clean context."""
    rush, hypercorn = fastapi_servers
    client = {**HTTP1_CLIENTS, **H2_CLIENTS}[client_name]
    answers = same_answers(rush, hypercorn, client, [f"/{endpoint}?set=first", f"/{endpoint}"])
    assert answers == [{"request_var": "unset"}] * 2, answers


# ---------------------------------------------------------------------------
# Django: the active language, an asgiref Local (a ContextVar under ASGI)

DJANGO_APP = "tests.differential.apps.isolation_django:application"


@pytest.fixture(scope="module")
def django_servers(module_servers: ServerFactory) -> tuple[RushServer, RushServer]:
    return rush_and_hypercorn(module_servers, DJANGO_APP)


DJANGO_CASES = [
    pytest.param(view, client_name, id=f"{view}-{client_name}")
    for view in ("sync", "async")
    for client_name in ("pipelined", "keep-alive", "separate", "h2-together")
]


@pytest.mark.parametrize(("view", "client_name"), DJANGO_CASES)
def test_a_django_request_starts_in_the_default_language(
    django_servers: tuple[RushServer, RushServer], view: str, client_name: str
) -> None:
    """A Django view activates French and does not deactivate it: the next request still finds
    the default language. Oracle: hypercorn, a task per request in a clean context."""
    rush, hypercorn = django_servers
    client = {**HTTP1_CLIENTS, **H2_CLIENTS}[client_name]
    answers = same_answers(rush, hypercorn, client, [f"/{view}?set=fr", f"/{view}"])
    assert answers == [{"language": "en-us"}] * 2, answers


# ---------------------------------------------------------------------------
# A rush App: plain and async handlers


APP_CASES = [
    pytest.param("/plain?set=first", "/async", "pipelined", id="plain-then-async-pipelined"),
    pytest.param("/plain?set=first", "/async", "separate", id="plain-then-async-separate"),
    pytest.param("/plain?set=first", "/plain", "separate", id="plain-then-plain-separate"),
    pytest.param("/plain?set=first", "/plain", "keep-alive", id="plain-then-plain-keep-alive"),
    pytest.param("/async?set=first", "/plain", "pipelined", id="async-then-plain-pipelined"),
    pytest.param("/async?set=first", "/async", "pipelined", id="async-then-async-pipelined"),
    pytest.param("/async?set=first&suspend=1", "/async", "keep-alive", id="suspending-async-then-async-keep-alive"),
    pytest.param("/async?set=first&suspend=1", "/async", "pipelined", id="suspending-async-then-async-pipelined"),
]


@pytest.mark.parametrize(("first", "second", "client_name"), APP_CASES)
def test_an_app_handler_starts_clean(rush_server: ServerFactory, first: str, second: str, client_name: str) -> None:
    """A rush App handler sets the ContextVar: the next request finds it unset. Oracle: the same
    second request alone, the first request of a fresh server (a rush App runs under rush only)."""
    alone = separate(start_server(rush_server, "rush", APP_APP), [second])
    assert alone == [{"request_var": "unset"}], alone
    answers = HTTP1_CLIENTS[client_name](start_server(rush_server, "rush", APP_APP), [first, second])
    assert answers[1:] == alone, answers


# ---------------------------------------------------------------------------
# WSGI

WSGI_APP = "tests.differential.apps.isolation_wsgi:app"


@pytest.fixture(scope="module")
def wsgi_on_one_thread(module_servers: ServerFactory) -> tuple[RushServer, RushServer]:
    """rush serving WSGI on its loop thread, and gunicorn's sync worker (one thread, no keep-alive)."""
    return start_server(module_servers, "rush", WSGI_APP), start_server(module_servers, "gunicorn", WSGI_APP)


@pytest.fixture(scope="module")
def wsgi_on_threads(module_servers: ServerFactory) -> tuple[RushServer, RushServer]:
    """rush with ``--threads 4``, and gunicorn's gthread worker with 4 threads (keep-alive and pipelining)."""
    return (
        start_server(module_servers, "rush", WSGI_APP, "--threads", "4"),
        start_server(module_servers, "gunicorn", WSGI_APP, "--worker-class", "gthread", "--threads", "4"),
    )


@pytest.fixture(scope="module")
def wsgi_on_one_pool_thread(module_servers: ServerFactory) -> tuple[RushServer, RushServer]:
    """rush with ``--threads 1``, and gunicorn's gthread worker with 1 thread: one pool thread each."""
    return (
        start_server(module_servers, "rush", WSGI_APP, "--threads", "1"),
        start_server(module_servers, "gunicorn", WSGI_APP, "--worker-class", "gthread", "--threads", "1"),
    )


@pytest.mark.parametrize("targets", [["/ctx?set=first", "/ctx"], ["/local?set=first", "/local"]], ids=["ctx", "local"])
@pytest.mark.parametrize("pool", [False, True], ids=["loop-thread", "one-pool-thread"])
def test_wsgi_context_vars_and_thread_locals_last_as_under_gunicorn(
    request: pytest.FixtureRequest, targets: list[str], pool: bool
) -> None:
    """gunicorn's sync worker calls every request on its one thread in its one context, so a
    ContextVar or ``threading.local`` value a request sets is still there for the next request:
    WSGI apps written for it (and for rush, which calls WSGI apps on its loop thread) may rely on
    that, or on clearing it themselves. The same holds for a pool of one thread (rush
    ``--threads 1``, gunicorn's gthread worker with one thread). Oracle: gunicorn, whichever way
    it goes (both keep the value today: if rush starts each WSGI request in a clean context, this
    test says so)."""
    rush, gunicorn = request.getfixturevalue("wsgi_on_one_pool_thread" if pool else "wsgi_on_one_thread")
    answers = same_answers(rush, gunicorn, separate, targets)
    assert answers[0] != answers[1], f"gunicorn no longer keeps the value: {answers}"


def test_a_wsgi_exception_does_not_outlive_its_request(wsgi_on_one_thread: tuple[RushServer, RushServer]) -> None:
    """After a request whose app raised (a 500), the next request's app is not running inside the
    handling of that exception. Oracle: gunicorn's sync worker."""

    def script(server: RushServer, _: object) -> Answers:
        with server.connect() as connection:
            connection.send(request("GET", "/raise", [("Connection", "close")]))
            status = connection.read_response().status
        return [status, *separate(server, ["/exception"])]

    answers = same_answers(*wsgi_on_one_thread, script)
    assert answers == [500, {"handling": "None"}], answers


@pytest.mark.parametrize("client_name", ["separate", "keep-alive", "pipelined"])
@pytest.mark.parametrize("threads", [False, True], ids=["one-thread", "threads"])
def test_changes_to_an_environ_stay_in_it(
    wsgi_on_one_thread: tuple[RushServer, RushServer],
    wsgi_on_threads: tuple[RushServer, RushServer],
    client_name: str,
    threads: bool,
) -> None:
    """A request adds a key to its environ, changes ``PATH_INFO`` and replaces ``wsgi.errors``:
    the next request sees none of it. Oracle: gunicorn, which builds each environ anew (its
    gthread worker where the client keeps the connection, since the sync worker closes it)."""
    rush, gunicorn = wsgi_on_threads if threads else wsgi_on_one_thread
    if client_name != "separate" and not threads:
        gunicorn = wsgi_on_threads[1]
    answers = same_answers(rush, gunicorn, HTTP1_CLIENTS[client_name], ["/environ", "/environ"])
    assert answers == [{"key": False, "errors": False}] * 2, answers


@pytest.mark.parametrize("threads", [False, True], ids=["one-thread", "threads"])
def test_the_unread_rest_of_a_body_does_not_reach_the_next_request(
    wsgi_on_one_thread: tuple[RushServer, RushServer], wsgi_on_threads: tuple[RushServer, RushServer], threads: bool
) -> None:
    """A request reads 3 bytes of its 6-byte body; the request pipelined behind it reads its own
    body whole from ``wsgi.input``, not the rest of the first. Oracle: gunicorn's gthread worker."""
    rush = (wsgi_on_threads if threads else wsgi_on_one_thread)[0]

    def script(server: RushServer, _: object) -> Answers:
        with server.connect() as connection:
            connection.send(request("POST", "/read?n=3", body=b"abcdef") + request("POST", "/read", body=b"xyz"))
            return [response.json() for response in connection.read_responses(2)]

    answers = same_answers(rush, wsgi_on_threads[1], script)
    assert answers == [{"read": "abc"}, {"read": "xyz"}], answers


@pytest.mark.parametrize("client_name", HTTP1_CLIENTS)
def test_each_app_request_runs_as_a_task_of_its_own(rush_server: ServerFactory, client_name: str) -> None:
    """A rush App's async handler must not run as the task of the request before it. Oracle: the
    same request alone (the first ``/task`` of a fresh server finds no previous task)."""
    alone = separate(start_server(rush_server, "rush", APP_APP), ["/task"])
    assert alone == [{"previous_requests_task": False}], alone
    answers = HTTP1_CLIENTS[client_name](start_server(rush_server, "rush", APP_APP), ["/task", "/task"])
    assert answers[1:] == alone, answers
