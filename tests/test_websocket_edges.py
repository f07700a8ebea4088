"""WebSocket edge cases on the loop, mostly with raw sockets: handshake
refusals, upgrades nobody takes, the ASGI denial extension and failures
before and after accept, the scope, exactly-once disconnects and sends after
the end, the size limit, backpressure towards a client that stops reading,
keepalive pings and the accept deadline, graceful shutdown, 1,000
concurrent connections, and the rush App's broadcast group."""

from __future__ import annotations

import asyncio
import json
import resource
import select
import signal
import ssl
import urllib.request
from pathlib import Path

import pytest
import trustme
import websockets
from support import RushServer, ServerFactory, request, rss_kib, wait_for
from websockets.exceptions import ConnectionClosed, InvalidStatus
from ws_support import masked_frame, read_frame, read_head, run, state, upgrade_request, ws_url

ASGI = "tests.apps.ws_apps:asgi_app"
RUSH_APP = "tests.apps.ws_apps:rush_app"


@pytest.fixture(scope="module")
def asgi(module_servers: ServerFactory) -> RushServer:
    return module_servers(ASGI)


@pytest.fixture(scope="module")
def rush_app(module_servers: ServerFactory) -> RushServer:
    return module_servers(RUSH_APP)


@pytest.mark.parametrize(
    ("fields", "drop", "status"),
    [
        ({"Sec-WebSocket-Version": "8"}, (), 426),
        ({}, ("Sec-WebSocket-Version",), 426),
        ({}, ("Sec-WebSocket-Key",), 400),
        ({"Sec-WebSocket-Key": "c2hvcnQ="}, (), 400),
        ({"Connection": "keep-alive"}, (), 400),
    ],
)
def test_bad_handshakes_are_refused_and_closed(asgi: RushServer, fields: dict, drop: tuple, status: int) -> None:
    with asgi.connect() as connection:
        connection.send(upgrade_request("/echo", fields, drop))
        result = connection.read_until_close()
    [response] = result.responses
    assert response.status == status
    if status == 426:
        assert response.header("Sec-WebSocket-Version") == "13"


def test_an_upgrade_nobody_takes_is_an_ordinary_request(rush_app: RushServer, rush_server: ServerFactory) -> None:
    with rush_app.connect() as connection:
        connection.send(upgrade_request("/no-such-route"))
        assert connection.read_response().status == 404
    # A WebSocket route asked without the upgrade says what it speaks.
    with rush_app.connect() as connection:
        connection.send(request("GET", "/echo"))
        response = connection.read_response()
        assert response.status == 426 and response.header("Upgrade") == "websocket"
    # A WSGI app has no WebSocket: the upgrade is an ordinary request to it.
    wsgi = rush_server("basic")
    with wsgi.connect() as connection:
        connection.send(upgrade_request("/"))
        assert connection.read_response().status == 200


def test_http_response_extension_denies_with_the_apps_response(asgi: RushServer) -> None:
    with asgi.connect() as connection:
        connection.send(upgrade_request("/http-deny"))
        [response] = connection.read_until_close().responses
    assert (response.status, response.body, response.header("x-why")) == (401, b"not you!", "no")


def test_app_raising_before_accept_is_500_and_after_is_1011(asgi: RushServer) -> None:
    async def client() -> int:
        with pytest.raises(InvalidStatus) as refused:
            async with websockets.connect(ws_url(asgi, "/raise-before")):
                pass
        assert refused.value.response.status_code == 500
        async with websockets.connect(ws_url(asgi, "/raise-after")) as ws:
            await ws.send("go")
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            return closed.value.rcvd.code

    assert run(client()) == 1011
    asgi.wait_for_log("failing before accept, on purpose")
    asgi.wait_for_log("failing after accept, on purpose")


def test_scope(asgi: RushServer) -> None:
    async def client() -> dict:
        async with websockets.connect(ws_url(asgi, "/scope?room=7"), subprotocols=["a", "b"]) as ws:
            return json.loads(await ws.recv())

    scope = run(client())
    assert scope["type"] == "websocket" and scope["scheme"] == "ws" and scope["path"] == "/scope"
    assert scope["query_string"] == "room=7" and scope["subprotocols"] == ["a", "b"]
    assert scope["spec_version"] == "2.4" and "websocket.http.response" in scope["extensions"]
    assert ["upgrade", "websocket"] in scope["headers"]


def test_a_rush_handler_sees_the_request(rush_app: RushServer) -> None:
    async def client() -> dict:
        async with websockets.connect(ws_url(rush_app, "/request?a=1&b=%20"), origin="http://example.test") as ws:
            return json.loads(await ws.recv())

    assert run(client()) == {"path": "/request", "query": "a=1&b=%20", "origin": "http://example.test"}


def test_disconnect_after_a_server_close_is_delivered_once(asgi: RushServer) -> None:
    async def client() -> int:
        async with websockets.connect(ws_url(asgi, "/server-close")) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            return closed.value.rcvd.code

    assert run(client()) == 4000
    # The app got one websocket.disconnect (4000, echoed); receiving again raises an OSError.
    wait_for(lambda: state(asgi)["late_send"] == "receive: ConnectionResetError", "the second receive raised")
    assert state(asgi)["disconnects"].count(4000) == 1


def test_send_after_the_client_left_raises_and_is_not_logged(asgi: RushServer) -> None:
    async def client() -> None:
        async with websockets.connect(ws_url(asgi, "/send-after-close")) as ws:
            await ws.close(4100)

    run(client())
    wait_for(lambda: state(asgi)["late_send"] == "ConnectionResetError", "the app's late send raised")
    # The uncaught second send ended the app with ConnectionResetError: no traceback for it.
    assert "raised and not caught" not in asgi.stderr_text()
    assert "Exception in WebSocket app for GET /send-after-close" not in asgi.stderr_text()


def test_a_dropped_connection_is_reported_as_1006(asgi: RushServer) -> None:
    before = state(asgi)["disconnects"].count(1006)
    with asgi.connect() as connection:
        connection.send(upgrade_request("/echo"))
        assert read_head(connection).startswith(b"HTTP/1.1 101")
        connection.send(masked_frame(1, b"hi"))
        assert read_frame(connection) == (1, b"hi")
    # Closed without a close frame.
    wait_for(lambda: state(asgi)["disconnects"].count(1006) > before, "the app heard 1006")


def test_without_per_message_deflate_no_extension_is_negotiated(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI, "--no-ws-per-message-deflate")

    async def client() -> None:
        async with websockets.connect(ws_url(server, "/echo"), compression="deflate") as ws:
            assert ws.response.headers.get("Sec-WebSocket-Extensions") is None
            await ws.send("plain")
            assert await ws.recv() == "plain"

    run(client())


def test_over_tls_the_scheme_is_wss(rush_server: ServerFactory, tmp_path: Path) -> None:
    authority = trustme.CA()
    leaf = authority.issue_cert("127.0.0.1")
    chain, key = tmp_path / "chain.pem", tmp_path / "key.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    leaf.private_key_pem.write_to_path(key)
    server = rush_server(ASGI, "--ssl-certfile", str(chain), "--ssl-keyfile", str(key))
    context = ssl.create_default_context()
    authority.configure_trust(context)
    big = bytes(range(256)) * 8192  # 2 MiB through TLS records

    async def client() -> str:
        url = f"wss://127.0.0.1:{server.port}"
        async with websockets.connect(f"{url}/echo", ssl=context, max_size=None) as ws:
            await ws.send(big)
            assert await ws.recv() == big
        async with websockets.connect(f"{url}/scope", ssl=context) as ws:
            return json.loads(await ws.recv())["scheme"]

    assert run(client()) == "wss"


def test_a_message_over_ws_max_size_is_closed_with_1009(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI, "--ws-max-size", "1000")

    async def client() -> int:
        async with websockets.connect(ws_url(server, "/echo")) as ws:
            await ws.send("x" * 1000)
            assert await ws.recv() == "x" * 1000
            await ws.send("x" * 1001)
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            return closed.value.rcvd.code

    assert run(client()) == 1009
    wait_for(lambda: 1009 in state(server)["disconnects"], "the app heard 1009")


def test_a_client_that_stops_reading_makes_the_apps_send_wait(asgi: RushServer) -> None:
    # 64 messages of 1 MiB to a client with a small receive buffer that reads nothing.
    with asgi.connect(rcvbuf=64 * 1024) as connection:
        connection.send(upgrade_request("/flood"))
        assert read_head(connection).startswith(b"HTTP/1.1 101")
        blocked_after = wait_for(lambda: state(asgi)["flood_blocked_after"], "a send() of the flood waited")
        # Bounded: the high-water mark (1 MiB) plus what the kernel buffers, not 64 MiB.
        assert blocked_after <= 24
        assert not state(asgi)["flood_done"]
        # Now read everything: all 64 messages arrive intact, then the close.
        for _ in range(64):
            opcode, payload = read_frame(connection)
            assert opcode == 2 and payload == b"x" * 1024 * 1024
        assert read_frame(connection) == (8, b"\x03\xe8")
        connection.send(masked_frame(8, b"\x03\xe8"))
    wait_for(lambda: state(asgi)["flood_done"], "the flood finished")


def test_reading_pauses_while_the_apps_queue_is_full(rush_server: ServerFactory) -> None:
    server = rush_server(RUSH_APP, "--ws-max-queue", "2")
    frame = masked_frame(2, bytes(64 * 1024))
    limit = 64 * 1024 * 1024
    with server.connect() as connection:
        connection.send(upgrade_request("/held"))
        assert read_head(connection).startswith(b"HTTP/1.1 101")
        # The app takes nothing: the server stops reading after two messages,
        # so the kernel's buffers fill and sending blocks well before 64 MiB.
        connection.sock.setblocking(False)
        sent = 0
        pending = b""
        while sent < limit:
            pending = pending or frame
            try:
                count = connection.sock.send(pending)
            except BlockingIOError:
                # Give a reading server every chance to drain (a failure guard, not a timing).
                _, writable, _ = select.select([], [connection.sock], [], 2.0)
                if not writable:
                    break
                continue
            pending = pending[count:]
            sent += count
        assert sent < limit, "the server kept reading while the app took nothing"
        connection.sock.settimeout(15)
        with urllib.request.urlopen(f"{server.url}/release", timeout=15) as response:
            assert response.read() == b"released"
        # The app now reads: the frame cut short is finished, then every frame arrives.
        connection.send(pending)
        frames = (sent + len(pending)) // len(frame)
        connection.send(masked_frame(1, b"end"))
    wait_for(lambda: state(server).get("held_count") is not None, "the app counted the messages")
    assert state(server)["held_count"] == frames


def test_pings_and_a_client_that_never_answers_them(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI, "--ws-ping-interval", "1", "--ws-ping-timeout", "1")
    with server.connect() as connection:
        connection.send(upgrade_request("/echo"))
        assert read_head(connection).startswith(b"HTTP/1.1 101")
        opcode, _ = read_frame(connection)
        assert opcode == 9  # a ping, which this client does not answer
        connection.read_until_close()
    wait_for(lambda: 1006 in state(server)["disconnects"], "the app heard the drop as 1006")


def test_an_app_that_never_accepts_is_cut_off(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI, "--body-timeout", "1")
    with server.connect() as connection:
        connection.send(upgrade_request("/hang"))
        assert connection.read_until_close().responses == []
    wait_for(lambda: 1006 in state(server)["disconnects"], "the app heard the drop")


def test_graceful_shutdown_closes_with_1001(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI)

    async def client() -> int:
        async with websockets.connect(ws_url(server, "/echo")) as ws:
            await ws.send("hi")
            assert await ws.recv() == "hi"
            server.send_signal(signal.SIGTERM)
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            return closed.value.rcvd.code

    assert run(client()) == 1001
    assert server.wait_exit() == 0


def test_a_reload_closes_with_1012(rush_server: ServerFactory) -> None:
    """1012 (service restart) tells the client to reconnect, to the new worker."""
    server = rush_server(ASGI)

    async def client() -> int:
        async with websockets.connect(ws_url(server, "/echo")) as ws:
            await ws.send("hi")
            assert await ws.recv() == "hi"
            server.send_signal(signal.SIGHUP)
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            return closed.value.rcvd.code

    assert run(client()) == 1012
    server.wait_for_log("reload finished")


def test_only_allowed_origins_may_open_a_websocket(rush_server: ServerFactory) -> None:
    """--ws-allowed-origins: another site's page (cross-site WebSocket
    hijacking), or a handshake with no Origin, gets 403 before the app runs."""
    server = rush_server(
        ASGI, "--ws-allowed-origins", "https://good.example", "--ws-allowed-origins", "https://also.example:8443"
    )

    async def echo(origin: str) -> str:
        async with websockets.connect(ws_url(server, "/echo"), origin=origin) as ws:
            await ws.send("hi")
            return await ws.recv()

    assert run(echo("https://good.example")) == "hi"
    assert run(echo("HTTPS://Also.Example:8443")) == "hi"
    calls = state(server)["websocket_calls"]
    for origin in ("https://evil.example", "https://good.example.evil", "null"):
        with pytest.raises(InvalidStatus) as refused:
            run(echo(origin))
        assert refused.value.response.status_code == 403
        assert b"--ws-allowed-origins" in refused.value.response.body
    with server.connect() as connection:
        connection.send(upgrade_request("/echo"))  # no Origin at all
        assert [response.status for response in connection.read_until_close().responses] == [403]
    assert state(server)["websocket_calls"] == calls, "a refused handshake reached the app"


def idle_connections_growth_kib(server: RushServer, compression: str | None, count: int = 1000) -> int:
    """The worker's RSS growth (KiB) while ``count`` WebSockets are open and
    idle, each after one echoed message (so both directions' deflate state,
    if kept, exists)."""
    worker = server.single_worker()
    before = rss_kib(worker)

    async def client() -> int:
        sockets = []
        try:
            for number in range(count):
                ws = await websockets.connect(ws_url(server, "/echo"), compression=compression, open_timeout=30)
                sockets.append(ws)
                await ws.send(f"message {number} " * 20)
                assert await ws.recv() == f"message {number} " * 20
            return rss_kib(worker) - before
        finally:
            await asyncio.gather(*(ws.close() for ws in sockets))

    return run(client())


def test_an_idle_compressed_connection_holds_at_most_64_kib_of_deflate_state(rush_server: ServerFactory) -> None:
    """1,000 idle connections with permessage-deflate against 1,000 without
    (the oracle for everything else a connection costs): the difference is
    the compression state, at most 64 KiB a connection."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    plain = idle_connections_growth_kib(rush_server(ASGI, "--no-ws-per-message-deflate"), None)
    compressed = idle_connections_growth_kib(rush_server(ASGI), "deflate")
    per_connection = (compressed - plain) / 1000
    print(f"deflate state per idle connection: {per_connection:.1f} KiB ({compressed=} {plain=})")
    assert per_connection <= 64, (
        f"{per_connection:.0f} KiB of deflate state per idle connection ({compressed=} {plain=})"
    )


def test_a_thousand_concurrent_connections_echo(asgi: RushServer) -> None:
    async def one(number: int) -> None:
        async with websockets.connect(ws_url(asgi, "/echo"), compression=None, open_timeout=30) as ws:
            await ws.send(f"message {number}")
            assert await ws.recv() == f"message {number}"

    async def client() -> None:
        await asyncio.gather(*(one(number) for number in range(1000)))

    run(client())


def test_broadcast_reaches_every_member(rush_app: RushServer) -> None:
    async def client() -> None:
        members = [
            await websockets.connect(ws_url(rush_app, "/rooms/lobby"), compression=compression)
            for compression in ["deflate", None] * 10
        ]
        try:
            await members[0].send("count")
            assert await members[0].recv() == "20"
            await members[3].send("hello all")
            for member in members:
                assert await member.recv() == "lobby:hello all"
            # A member that left is dropped from the group.
            await members.pop().close()
            await members[0].send("count")
            assert await wait_count(members[0], "19")
        finally:
            for member in members:
                await member.close()

    async def wait_count(ws: websockets.ClientConnection, expected: str) -> bool:
        # The departure is processed before the next message from another connection.
        while (answer := await ws.recv()) != expected:
            await ws.send("count")
        return answer == expected

    run(client())
