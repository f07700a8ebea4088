"""HTTP/2's remaining conformance items (issue 24), over real sockets with
real clients (httpx with ``http2=True``, the ``h2`` package for frame-level
checks).

* A response taken back after it was rendered (a static 404 the app's own
  404 page replaces, a failed render or a failed 404 page replaced by a 500)
  reaches an HTTP/2 client as the replacement, never as a reset stream, and
  the same as over HTTP/1.1. (``/bad-value`` is a guard only: a value that
  cannot be rendered fails before anything is sent, so it never reset.)"""

from __future__ import annotations

import socket

import h2.config
import h2.connection
import h2.events
import httpx
import pytest
from support import GUARD_TIMEOUT, RushServer, ServerFactory, clean_environment


@pytest.fixture(scope="module")
def fallbacks(module_servers: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> RushServer:
    site = tmp_path_factory.mktemp("fallback-site")
    (site / "here.txt").write_text("a static file\n")
    env = clean_environment({"RUSHTEST_STATIC_DIR": str(site)})
    return module_servers("h2_fallbacks", "--http", "auto", env=env)


def fetch_both(server: RushServer, path: str) -> tuple[httpx.Response, httpx.Response]:
    """The same GET over HTTP/1.1 and over h2 (cleartext, prior knowledge)."""
    with httpx.Client(base_url=server.url, timeout=GUARD_TIMEOUT) as client:
        http1 = client.get(path)
    with httpx.Client(base_url=server.url, http2=True, http1=False, timeout=GUARD_TIMEOUT) as client:
        http2 = client.get(path)
    assert (http1.http_version, http2.http_version) == ("HTTP/1.1", "HTTP/2")
    return http1, http2


@pytest.mark.parametrize(
    ("path", "status", "page", "text"),
    [
        # The static 404 is rendered first, then replaced by the app's page.
        ("/static/missing.txt", 404, "app-404", "the app's own 404 for /static/missing.txt"),
        # That page raises: the app's 500 page replaces it in turn.
        ("/static/explode.txt", 500, "app-500", "the app's own 500 for /static/explode.txt"),
        # A handler's value that cannot be sent.
        ("/bad-value", 500, "app-500", "the app's own 500 for /bad-value"),
    ],
)
def test_a_replaced_answer_arrives_over_h2_as_over_http1(
    fallbacks: RushServer, path: str, status: int, page: str, text: str
) -> None:
    http1, http2 = fetch_both(fallbacks, path)
    for answer in (http1, http2):
        assert (answer.status_code, answer.headers.get("x-page"), answer.text) == (status, page, text)
    # Nothing of the first answer leaked into the head that went out.
    assert http2.headers.get_list("content-length") == [str(len(text))]
    fallbacks.assert_running(f"after {path}")


def test_the_replacement_is_the_streams_only_answer(fallbacks: RushServer) -> None:
    """Frame by frame: one HEADERS (the app's 404) and its DATA on the stream,
    no RST_STREAM, and the connection serves the next stream."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    with socket.create_connection(("127.0.0.1", fallbacks.port), timeout=GUARD_TIMEOUT) as sock:
        sock.sendall(connection.data_to_send())
        events: list[h2.events.Event] = []
        for stream, path in ((1, "/static/missing.txt"), (3, "/static/here.txt")):
            headers = [(":method", "GET"), (":scheme", "http"), (":authority", "localhost"), (":path", path)]
            connection.send_headers(stream, headers, end_stream=True)
            sock.sendall(connection.data_to_send())
            ended = False
            while not ended:
                data = sock.recv(65536)
                assert data, "the server closed the connection"
                for event in connection.receive_data(data):
                    events.append(event)
                    ended |= isinstance(event, h2.events.StreamEnded | h2.events.StreamReset) and (
                        event.stream_id == stream
                    )
                sock.sendall(connection.data_to_send())
    resets = [event for event in events if isinstance(event, h2.events.StreamReset)]
    assert resets == []
    heads = [dict(event.headers) for event in events if isinstance(event, h2.events.ResponseReceived)]
    assert [(head[b":status"], head.get(b"x-page")) for head in heads] == [(b"404", b"app-404"), (b"200", None)]
    bodies = {1: b"", 3: b""}
    for event in events:
        if isinstance(event, h2.events.DataReceived):
            bodies[event.stream_id] += event.data
    assert bodies == {1: b"the app's own 404 for /static/missing.txt", 3: b"a static file\n"}
