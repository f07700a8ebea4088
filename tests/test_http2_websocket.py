"""WebSocket over HTTP/2 (RFC 8441 extended CONNECT), over real sockets:
the ``h2`` package drives the connection and the CONNECT by hand,
``wsproto`` frames the WebSocket (tests/h2_ws_client.py), and hypercorn,
which serves RFC 8441 too, is the oracle for what the app sees and the
client gets (tests/differential ``start_pair``).

Covers the setting (offered when the app takes WebSockets, and ``h2``'s
PROTOCOL_ERROR without it), other ``:protocol`` values, each interface
(raw ASGI, Starlette, the rush App) over h2c and TLS: echo of text, bytes,
fragmented and large messages with and without permessage-deflate, the
subprotocol, close codes both ways and END_STREAM after the close, a
close before accept (403) and ``websocket.http.response``, the version
check, a client's RST_STREAM mid-message seen by the app as 1006, a
client that does not read pausing the app's ``send()`` at the stream's
high-water mark, ``--ws-max-size``, keepalive pings, the drain's 1001,
and the access log. Autobahn's client (tests/test_websocket_autobahn.py)
does not speak RFC 8441, so the frame-level conformance run stays HTTP/1.1.
"""

from __future__ import annotations

import re
import signal
import urllib.request
from pathlib import Path

import pytest
from h2.errors import ErrorCodes
from h2_ws_client import H2WebSocket
from support import GUARD_TIMEOUT, RushServer, ServerFactory, headless_chromium, wait_for, write_localhost_pki
from ws_support import read_head, state, upgrade_request
from wsproto.events import BytesMessage, CloseConnection, Ping

APPS = {
    "asgi": "tests.apps.ws_apps:asgi_app",
    "starlette": "tests.apps.ws_apps:starlette_app",
    "rush": "tests.apps.ws_apps:rush_app",
}
ASGI = APPS["asgi"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_localhost_pki(tmp_path_factory.mktemp("h2wspki"))


def tls_args(pki: dict[str, Path]) -> list[str]:
    return ["--ssl-certfile", str(pki["chain"]), "--ssl-keyfile", str(pki["key"])]


@pytest.fixture(scope="module", params=list(APPS))
def server(request: pytest.FixtureRequest, module_servers: ServerFactory) -> RushServer:
    return module_servers(APPS[request.param], "--workers", "1")


@pytest.fixture(scope="module")
def asgi(module_servers: ServerFactory) -> RushServer:
    return module_servers(ASGI, "--workers", "1", "--access-log")


@pytest.fixture(scope="module")
def tls(module_servers: ServerFactory, pki: dict[str, Path]) -> RushServer:
    return module_servers(ASGI, "--workers", "1", *tls_args(pki))


def state_over_tls(server: RushServer) -> dict:
    """GET /state over HTTP/1.1 with TLS (the certificate is the test's own)."""
    import json
    import ssl

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    url = f"https://127.0.0.1:{server.port}/state"
    with urllib.request.urlopen(url, timeout=GUARD_TIMEOUT, context=context) as response:
        return json.loads(response.read())


def disconnect_seen(server: RushServer, before: int, code: int, read=state) -> None:
    """Waits until the app records a disconnect with ``code`` after the first
    ``before`` it recorded (an earlier test's app may record its own late)."""
    wait_for(lambda: code in read(server)["disconnects"][before:], f"the app to record a disconnect with {code}")


# -- the setting and the refusals ------------------------------------------------


@pytest.mark.parametrize("app", ["tests.apps.ws_apps:asgi_app", "tests.apps.ws_apps:rush_app"])
def test_the_setting_is_offered_to_apps_that_take_websockets(rush_server: ServerFactory, app: str) -> None:
    server = rush_server(app, "--workers", "1")
    with H2WebSocket(server.port) as client:
        assert client.connect_protocol_offered()


def test_without_the_setting_an_extended_connect_is_a_protocol_error(rush_server: ServerFactory) -> None:
    """A WSGI app takes no WebSocket: no SETTINGS_ENABLE_CONNECT_PROTOCOL, and
    ``h2`` resets a ``:protocol`` the setting did not allow (RFC 8441 section 3)."""
    server = rush_server("tests.apps.h2_apps:wsgi", "--workers", "1")
    with H2WebSocket(server.port) as client:
        assert not client.connect_protocol_offered()
        assert client.open("/echo") is None
        assert client.reset_code == ErrorCodes.PROTOCOL_ERROR


def test_another_protocol_is_not_implemented(asgi: RushServer) -> None:
    calls = state(asgi)["websocket_calls"]
    with H2WebSocket(asgi.port) as client:
        assert client.open("/echo", protocol="connect-udp") == 501
    assert state(asgi)["websocket_calls"] == calls


@pytest.mark.parametrize(
    ("fields", "status"),
    [
        ((), 426),
        ((("sec-websocket-version", "8"),), 426),
    ],
)
def test_the_version_is_checked_as_over_http1(asgi: RushServer, fields: tuple, status: int) -> None:
    calls = state(asgi)["websocket_calls"]
    with H2WebSocket(asgi.port) as client:
        assert client.open("/echo", fields) == status
        assert client.headers.get("sec-websocket-version") == "13"
    assert state(asgi)["websocket_calls"] == calls


def test_a_disallowed_origin_is_refused_before_the_app(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI, "--workers", "1", "--ws-allowed-origins", "https://good.example")
    calls = state(server)["websocket_calls"]
    with H2WebSocket(server.port) as client:
        fields = (("sec-websocket-version", "13"), ("origin", "https://evil.example"))
        assert client.open("/echo", fields) == 403
    with H2WebSocket(server.port) as client:
        fields = (("sec-websocket-version", "13"), ("origin", "https://good.example"))
        assert client.open("/echo", fields) == 200
        assert client.close_handshake().code == 1000
    assert state(server)["websocket_calls"] == calls + 1


# -- each interface ------------------------------------------------------------------


@pytest.mark.parametrize("over", ["h2c", "tls"])
def test_echo_with_the_chosen_subprotocol(server: RushServer, tls: RushServer, over: str) -> None:
    target = tls if over == "tls" else server
    with H2WebSocket(target.port, tls=over == "tls") as client:
        fields = (("sec-websocket-version", "13"), ("sec-websocket-protocol", "other, chat"))
        assert client.open("/echo", fields) == 200
        assert client.headers["sec-websocket-protocol"] == "chat"
        # RFC 8441 section 5: no Sec-WebSocket-Accept (there is no key).
        assert "sec-websocket-accept" not in client.headers
        for message in ["héllo", b"\x00\xffbytes", "", b""]:
            client.send_message(message)
            assert client.receive().data == message
        assert client.close_handshake().code == 1000
        # The server ends its side after the closing handshake.
        client.wait(lambda: client.ended, "END_STREAM after the close")
        assert client.reset_code is None


@pytest.mark.parametrize("deflate", [True, False])
def test_fragmented_and_large_messages_come_back_whole(server: RushServer, deflate: bool) -> None:
    """6 MiB in 1 MiB fragments: more than the stream's 1 MiB window both
    ways, so the credit must come back as the frames are decoded."""
    message = bytes(range(256)) * (6 * 4096)
    with H2WebSocket(server.port) as client:
        assert client.open("/echo", deflate=deflate) == 200
        assert ("sec-websocket-extensions" in client.headers) == deflate
        for index in range(0, len(message), 1024 * 1024):
            last = index + 1024 * 1024 >= len(message)
            client.send_message(message[index : index + 1024 * 1024], fragment=not last)
        assert client.receive().data == message
        client.send_message("after")
        assert client.receive().data == "after"
        assert client.close_handshake().code == 1000


def test_close_codes_both_ways(server: RushServer) -> None:
    before = len(state(server)["disconnects"])
    with H2WebSocket(server.port) as client:
        assert client.open("/echo") == 200
        assert client.close_handshake(4001, "bye").code == 4001
        client.wait(lambda: client.ended, "END_STREAM after the close")
    disconnect_seen(server, before, 4001)
    with H2WebSocket(server.port) as client:
        assert client.open("/echo") == 200
        client.send_message("close:4002:see you")
        close = client.receive()
        assert isinstance(close, CloseConnection)
        assert (close.code, close.reason) == (4002, "see you")
        client.send(close.response())
        client.wait(lambda: client.ended, "END_STREAM after the close")
        assert client.reset_code is None


def test_a_close_before_accept_is_a_403(server: RushServer) -> None:
    with H2WebSocket(server.port) as client:
        assert client.open("/deny") == 403


def test_an_http_response_instead_of_the_websocket(asgi: RushServer) -> None:
    with H2WebSocket(asgi.port) as client:
        assert client.open("/http-deny") == 401
        assert client.headers["x-why"] == "no"
        assert client.body == b"not you!"


def test_the_scope_is_the_http1_one_with_http_version_2(asgi: RushServer, tls: RushServer) -> None:
    import json

    for target, scheme in ((asgi, "ws"), (tls, "wss")):
        with H2WebSocket(target.port, tls=scheme == "wss") as client:
            fields = (("sec-websocket-version", "13"), ("sec-websocket-protocol", "a, b"), ("x-custom", "1"))
            assert client.open("/scope?q=1", fields) == 200
            scope = json.loads(client.receive().data)
        assert scope["type"] == "websocket"
        assert scope["http_version"] == "2"
        assert scope["scheme"] == scheme
        assert (scope["path"], scope["query_string"]) == ("/scope", "q=1")
        assert scope["subprotocols"] == ["a", "b"]
        assert "websocket.http.response" in scope["extensions"]
        headers = dict(scope["headers"])
        assert headers["host"] == f"127.0.0.1:{target.port}"
        assert headers["x-custom"] == "1"
        assert not any(name.startswith(":") for name, _ in scope["headers"])


# -- the client leaves, or does not read ---------------------------------------------


@pytest.mark.parametrize("over", ["h2c", "tls"])
def test_a_reset_mid_message_is_an_abnormal_closure_for_the_app(asgi: RushServer, tls: RushServer, over: str) -> None:
    target, read = (tls, state_over_tls) if over == "tls" else (asgi, state)
    before = len(read(target)["disconnects"])
    with H2WebSocket(target.port, tls=over == "tls") as client:
        assert client.open("/echo") == 200
        client.send_message("the first half of a message", fragment=True)
        client.reset(ErrorCodes.CANCEL)
        # The connection goes on: another WebSocket on it still works.
        assert client.open("/echo") == 200
        client.send_message("still here")
        assert client.receive().data == "still here"
    # hypercorn reports the same code for a stream closed without a close.
    disconnect_seen(target, before, 1006, read)


def test_a_client_that_does_not_read_pauses_the_app_at_the_streams_mark(asgi: RushServer) -> None:
    """The client never opens its 64 KiB window: the app's send() waits once
    the stream holds its high-water mark (256 KiB), long before the 1 MiB of
    an HTTP/1.1 connection; reading lets all 4 MiB through."""
    with H2WebSocket(asgi.port) as client:
        client.read = False
        assert client.open("/trickle") == 200
        blocked_at = wait_for(lambda: state(asgi)["trickle_blocked_at"], "the app's send() to wait")
        assert 0 < blocked_at <= 512 * 1024, blocked_at
        # Two more turns of the worker's loop: the app is still held.
        for _ in range(2):
            seen = state(asgi)
            assert not seen["trickle_done"]
            assert seen["trickle_sent"] <= 512 * 1024, seen
        client.start_reading()
        received = 0
        while received < 256 * 16 * 1024:
            event = client.receive()
            assert isinstance(event, BytesMessage), event
            received += len(event.data)
        close = client.receive()
        assert isinstance(close, CloseConnection) and close.code == 1000
    assert wait_for(lambda: state(asgi)["trickle_done"], "the app to finish")


def test_over_the_output_budget_the_app_is_paced_at_the_fair_share(rush_server: ServerFactory) -> None:
    """While the worker holds more unsent output than --max-worker-output (an
    HTTP/1.1 WebSocket client that reads nothing holds its 1 MiB messages),
    a WebSocket stream's send() waits at the fair share (64 KiB), as an
    HTTP/2 response's producer does, not at the stream's 256 KiB."""
    server = rush_server(ASGI, "--workers", "1", "--max-worker-output", "1M")
    with server.connect(rcvbuf=64 * 1024) as hog:
        hog.send(upgrade_request("/flood"))
        assert read_head(hog).startswith(b"HTTP/1.1 101")
        wait_for(lambda: state(server)["flood_blocked_after"], "the HTTP/1.1 flood to fill its mark")
        with H2WebSocket(server.port) as client:
            client.read = False
            assert client.open("/trickle") == 200
            blocked_at = wait_for(lambda: state(server)["trickle_blocked_at"], "the app's send() to wait")
            # 64 KiB in the client's window, 64 KiB queued, and what the app
            # framed before the drive that saw the budget spent.
            assert blocked_at <= 192 * 1024, blocked_at


def test_a_client_that_outruns_its_app_is_held_by_the_stream_window(rush_server: ServerFactory) -> None:
    """The app takes no message (``/held``, --ws-max-queue 2): the server
    stops decoding, so the credit of what it holds is not given back and the
    client's 1 MiB stream window closes, well before 16 MiB; once the app
    reads, every message arrives."""
    server = rush_server("tests.apps.ws_apps:rush_app", "--workers", "1", "--ws-max-queue", "2")
    message = bytes(16 * 1024)
    limit = 16 * 1024 * 1024
    with H2WebSocket(server.port) as client:
        assert client.open("/held") == 200
        sent = 0
        while sent < limit:
            frame = client.ws.send(BytesMessage(data=message))
            if client.h2.local_flow_control_window(client.stream) < len(frame):
                # Give a reading server every chance to open the window (a
                # failure guard, not a timing): a second of nothing ends it.
                client.pump(1.0)
                if client.h2.local_flow_control_window(client.stream) < len(frame):
                    break
            for start in range(0, len(frame), client.h2.max_outbound_frame_size):
                client.h2.send_data(client.stream, frame[start : start + client.h2.max_outbound_frame_size])
            client.flush()
            sent += len(message)
        assert sent < 2 * 1024 * 1024, "the server kept giving credit back while the app took nothing"
        with urllib.request.urlopen(f"{server.url}/release", timeout=GUARD_TIMEOUT) as response:
            assert response.read() == b"released"
        client.send_message("end")
        # The app closes after "end": every message before it was taken.
        close = client.receive()
        assert isinstance(close, CloseConnection) and close.code == 1000
    wait_for(lambda: state(server).get("held_count") is not None, "the app counted the messages")
    assert state(server)["held_count"] == sent // len(message)


def test_messages_received_before_a_reset_still_reach_the_app(rush_server: ServerFactory) -> None:
    """The app takes nothing yet (``/held``, --ws-max-queue 2) when the client
    sends five messages and "end", then resets the stream: the messages the
    server had received still reach the app, as over HTTP/1.1 the bytes
    before a socket's end are read, and then it hears the end."""
    server = rush_server("tests.apps.ws_apps:rush_app", "--workers", "1", "--ws-max-queue", "2")
    with H2WebSocket(server.port) as client:
        assert client.open("/held") == 200
        for _ in range(5):
            client.send_message(bytes(1000))
        client.send_message("end")
        # A PING's answer comes after the server took every frame before it.
        client.h2.ping(b"received")
        client.flush()
        client.wait(lambda: client.pong, "the PING's answer")
        client.reset(ErrorCodes.CANCEL)
        with urllib.request.urlopen(f"{server.url}/release", timeout=GUARD_TIMEOUT) as response:
            assert response.read() == b"released"
    wait_for(lambda: state(server).get("held_count") is not None, "the app counted the messages")
    assert state(server)["held_count"] == 5


def test_ws_max_size_closes_with_1009(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI, "--workers", "1", "--ws-max-size", "1K")
    with H2WebSocket(server.port) as client:
        assert client.open("/echo") == 200
        client.send_message(b"x" * 1000)
        assert len(client.receive().data) == 1000
        client.send_message(b"x" * 2000)
        close = client.receive()
        assert isinstance(close, CloseConnection) and close.code == 1009


def test_keepalive_pings_go_out_on_the_stream(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI, "--workers", "1", "--ws-ping-interval", "1", "--ws-ping-timeout", "30")
    with H2WebSocket(server.port) as client:
        assert client.open("/echo") == 200
        ping = client.wait(lambda: next((e for e in client.events if isinstance(e, Ping)), None), "a ping")
        client.events.remove(ping)
        client.send(ping.response())
        client.send_message("pong answered")
        assert client.receive().data == "pong answered"


def test_a_drain_closes_with_1001_and_ends_the_stream(rush_server: ServerFactory) -> None:
    server = rush_server(ASGI, "--workers", "1", "--graceful-timeout", str(GUARD_TIMEOUT))
    with H2WebSocket(server.port) as client:
        assert client.open("/echo") == 200
        client.send_message("before")
        assert client.receive().data == "before"
        server.send_signal(signal.SIGTERM)
        close = client.receive()
        assert isinstance(close, CloseConnection) and close.code == 1001
        assert client.goaway  # the connection's graceful GOAWAY
        client.send(close.response())
        client.wait(lambda: client.ended, "END_STREAM after the close")
    assert server.wait_exit() == 0


def test_each_websocket_has_one_access_log_line(asgi: RushServer) -> None:
    line = re.compile(r'"CONNECT (/\S+) HTTP/2" (\S+) ')

    def lines() -> list[tuple[str, str]]:
        return [(match[1], match[2]) for match in map(line.search, asgi.stdout_text().splitlines()) if match]

    before = len(lines())
    with H2WebSocket(asgi.port) as client:
        assert client.open("/echo?log=1") == 200
        assert client.close_handshake().code == 1000
    with H2WebSocket(asgi.port) as client:
        assert client.open("/deny") == 403
    found = wait_for(lambda: lines()[before:] if len(lines()) >= before + 2 else None, "two access-log lines")
    assert found == [("/echo?log=1", "200"), ("/deny", "403")]


def test_an_app_that_never_answers_the_handshake_is_cut_at_the_body_timeout(rush_server: ServerFactory) -> None:
    """As over HTTP/1.1, the app has until --body-timeout to answer: then the
    stream is reset and the app hears 1006; the connection goes on."""
    server = rush_server(ASGI, "--workers", "1", "--body-timeout", "1")
    before = len(state(server)["disconnects"])
    with H2WebSocket(server.port) as client:
        client.connect_protocol_offered()
        client.stream = client.h2.get_next_available_stream_id()
        headers = [
            (":method", "CONNECT"),
            (":protocol", "websocket"),
            (":scheme", "http"),
            (":path", "/hang"),
            (":authority", f"127.0.0.1:{server.port}"),
            ("sec-websocket-version", "13"),
        ]
        client.h2.send_headers(client.stream, headers)
        client.flush()
        client.wait(lambda: client.reset_code is not None, "the stream's reset")
        assert client.reset_code == ErrorCodes.CANCEL
        assert client.status is None
        assert client.open("/echo") == 200
    disconnect_seen(server, before, 1006)


# -- a browser -------------------------------------------------------------------------

BROWSER_SCRIPT = """
new Promise((resolve, reject) => {
  const base = "wss://127.0.0.1:PORT";
  const scope = new WebSocket(base + "/scope");
  scope.onerror = () => reject("the /scope WebSocket failed");
  scope.onmessage = (event) => {
    const echo = new WebSocket(base + "/echo", ["chat"]);
    echo.onerror = () => reject("the /echo WebSocket failed");
    echo.onopen = () => echo.send("héllo");
    echo.onmessage = (message) => {
      echo.onclose = (closed) => resolve(JSON.stringify({
        scope: JSON.parse(event.data), echo: message.data, protocol: echo.protocol, code: closed.code,
      }));
      echo.close(4005, "bye");
    };
  };
})
"""


def test_chromium_opens_wss_on_the_pages_h2_connection(rush_server: ServerFactory, tmp_path: Path) -> None:
    """Headless Chromium loads a page over h2 and TLS, then opens WebSockets
    on that connection (RFC 8441: the scope says ``http_version`` "2"), echoes
    and closes with a code the app records."""
    import asyncio
    import json
    import subprocess

    import websockets

    profile = tmp_path / "profile"
    command = headless_chromium(profile, "--remote-debugging-port=0", "about:blank")
    pki = write_localhost_pki(tmp_path)
    server = rush_server(ASGI, "--workers", "1", "--access-log", *tls_args(pki))
    before = len(state_over_tls(server)["disconnects"])
    chromium = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        active = profile / "DevToolsActivePort"
        wait_for(lambda: active.exists() and active.read_text().strip(), "Chromium's DevTools port")
        devtools = int(active.read_text().split()[0])

        def page_target() -> str | None:
            with urllib.request.urlopen(f"http://127.0.0.1:{devtools}/json", timeout=GUARD_TIMEOUT) as answer:
                pages = [target for target in json.loads(answer.read()) if target["type"] == "page"]
            return pages[0]["webSocketDebuggerUrl"] if pages else None

        target = wait_for(page_target, "Chromium's page")

        async def drive() -> dict:
            async with websockets.connect(target, max_size=None) as cdp:
                calls = iter(range(1, 1000))

                async def call(method: str, **params: object) -> dict:
                    number = next(calls)
                    await cdp.send(json.dumps({"id": number, "method": method, "params": params}))
                    while True:
                        answer = json.loads(await cdp.recv())
                        if answer.get("id") == number:
                            assert "error" not in answer, answer
                            return answer["result"]

                # The page comes over h2 first: Chromium opens a WebSocket
                # over HTTP/2 only on a connection it already has.
                await call("Page.enable")
                await call("Page.navigate", url=f"https://127.0.0.1:{server.port}/state")
                while json.loads(await cdp.recv()).get("method") != "Page.loadEventFired":
                    pass
                script = BROWSER_SCRIPT.replace("PORT", str(server.port))
                result = await call("Runtime.evaluate", expression=script, awaitPromise=True, returnByValue=True)
                assert "exceptionDetails" not in result, result
                return json.loads(result["result"]["value"])

        seen = asyncio.run(asyncio.wait_for(drive(), GUARD_TIMEOUT * 2))
    finally:
        chromium.terminate()
        chromium.wait(timeout=GUARD_TIMEOUT)
    assert seen["scope"]["http_version"] == "2"
    assert seen["scope"]["scheme"] == "wss"
    assert (seen["echo"], seen["protocol"], seen["code"]) == ("héllo", "chat", 4005)
    disconnect_seen(server, before, 4005, state_over_tls)
    logged = server.wait_for_log(r'"(GET|CONNECT) (/\w+) HTTP/2" (\d+)', count=3, stream="stdout")
    assert [(match[1], match[2], match[3]) for match in logged][:3] == [
        ("GET", "/state", "200"),
        ("CONNECT", "/scope", "200"),
        ("CONNECT", "/echo", "200"),
    ]
