"""WebSocket against every interface rush serves, over real sockets with the
`websockets` client: a raw ASGI app, Starlette, FastAPI and the rush App
(tests/apps/ws_apps.py has the same endpoints in each). Echo of text and
bytes, subprotocol choice, a message of several MiB in fragments, close
codes both ways (the app records the code it was told), and 403 when the
app closes before accepting."""

from __future__ import annotations

import pytest
import websockets
from support import RushServer, ServerFactory, wait_for
from websockets.exceptions import ConnectionClosed, InvalidStatus
from ws_support import run, state, ws_url

APPS = {
    "asgi": "tests.apps.ws_apps:asgi_app",
    "starlette": "tests.apps.ws_apps:starlette_app",
    "fastapi": "tests.apps.ws_apps:fastapi_app",
    "rush": "tests.apps.ws_apps:rush_app",
}


@pytest.fixture(scope="module", params=list(APPS))
def server(request: pytest.FixtureRequest, module_servers: ServerFactory) -> RushServer:
    return module_servers(APPS[request.param])


def test_echo_text_and_bytes_with_the_chosen_subprotocol(server: RushServer) -> None:
    async def client() -> None:
        async with websockets.connect(ws_url(server, "/echo"), subprotocols=["other", "chat"]) as ws:
            assert ws.subprotocol == "chat"
            await ws.send("héllo")
            assert await ws.recv() == "héllo"
            await ws.send(b"\x00\xffbytes")
            assert await ws.recv() == b"\x00\xffbytes"
            await ws.send("")
            assert await ws.recv() == ""

    run(client())


def test_no_subprotocol_when_none_offered(server: RushServer) -> None:
    async def client() -> None:
        async with websockets.connect(ws_url(server, "/echo")) as ws:
            assert ws.subprotocol is None
            assert ws.response.headers.get("Sec-WebSocket-Protocol") is None

    run(client())


@pytest.mark.parametrize("compression", ["deflate", None])
def test_a_large_message_in_fragments_comes_back_whole(server: RushServer, compression: str | None) -> None:
    message = bytes(range(256)) * (6 * 4096)  # 6 MiB

    async def client() -> None:
        async with websockets.connect(ws_url(server, "/echo"), max_size=None, compression=compression) as ws:
            # Sent as 1 MiB fragments: the server reassembles them.
            await ws.send(message[index : index + 1024 * 1024] for index in range(0, len(message), 1024 * 1024))
            assert await ws.recv() == message
            text = "ü" * (3 * 1024 * 1024)
            await ws.send(text)
            assert await ws.recv() == text

    run(client())


def test_client_close_code_reaches_the_app(server: RushServer) -> None:
    async def client() -> None:
        async with websockets.connect(ws_url(server, "/echo")) as ws:
            await ws.send("ping?")
            assert await ws.recv() == "ping?"
            await ws.close(4321, "client says bye")
            assert ws.close_code == 4321  # the server echoed it

    run(client())
    wait_for(lambda: 4321 in state(server)["disconnects"], "the app got websocket.disconnect 4321")


def test_server_close_code_reaches_the_client(server: RushServer) -> None:
    async def client() -> ConnectionClosed:
        async with websockets.connect(ws_url(server, "/echo")) as ws:
            await ws.send("close:4002:server says bye")
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
            return closed.value

    closed = run(client())
    assert closed.rcvd is not None
    assert (closed.rcvd.code, closed.rcvd.reason) == (4002, "server says bye")
    # The app hears the end of the closing handshake: our own code, echoed.
    wait_for(lambda: 4002 in state(server)["disconnects"], "the app got its disconnect after closing")


def test_close_before_accept_is_403(server: RushServer) -> None:
    async def client() -> None:
        with pytest.raises(InvalidStatus) as refused:
            async with websockets.connect(ws_url(server, "/deny")):
                pass
        assert refused.value.response.status_code == 403

    run(client())


def test_a_plain_request_still_works(server: RushServer) -> None:
    assert "disconnects" in state(server)
