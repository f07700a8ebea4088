"""The little HTTP/1.1 all the examples speak, so that each example file shows only its concurrency model.

Just enough for a browser, curl and wrk: a request is a head without a body
(GET), ``GET /`` is answered ``Hello, World!`` and any other request 404, every
response carries ``Content-Length``. Two ways to use it:

- blocking servers call `serve_one_request` on an accepted socket: read one
  request, answer it with ``Connection: close``, close. (Keeping the connection
  open would tie the thread or process to one client while others wait.)
- event-loop servers keep a `Connection` per socket in non-blocking mode and
  call `Connection.receive` when it is readable and `Connection.flush` when it
  is writable: it keeps the connection alive between requests and answers
  pipelined requests in order.

Run any example as ``python examples/concurrency/NAME.py PORT [HOST]``.
"""

from __future__ import annotations

import argparse
import socket

HELLO = b"Hello, World!"
NOT_FOUND = b"Not Found"
END_OF_HEAD = b"\r\n\r\n"
# A client whose head is larger than this is not speaking our tiny HTTP: it is dropped.
MAX_HEAD = 64 * 1024
RECEIVE_SIZE = 64 * 1024


def response(head: bytes, keep_alive: bool) -> bytes:
    """The whole response to the request whose head is ``head`` (request line and headers)."""
    method, _, rest = head.partition(b" ")
    target = rest.split(b" ", 1)[0]
    status, body = (b"200 OK", HELLO) if method == b"GET" and target == b"/" else (b"404 Not Found", NOT_FOUND)
    return b"".join(
        [
            b"HTTP/1.1 ",
            status,
            b"\r\nContent-Type: text/plain\r\nContent-Length: ",
            str(len(body)).encode(),
            b"\r\nConnection: ",
            b"keep-alive" if keep_alive else b"close",
            END_OF_HEAD,
            body,
        ]
    )


def client_wants_close(head: bytes) -> bool:
    """HTTP/1.1 keeps connections alive unless the client says ``Connection: close``;
    HTTP/1.0 closes them unless the client asks for keep-alive."""
    lowered = head.lower()
    if head.split(b"\r\n", 1)[0].endswith(b"HTTP/1.0"):
        return b"\r\nconnection: keep-alive" not in lowered
    return b"\r\nconnection: close" in lowered


def read_head(sock: socket.socket) -> bytes | None:
    """Blocks until one request head has arrived; None if the client left (or sent too much)."""
    received = b""
    while END_OF_HEAD not in received:
        chunk = sock.recv(RECEIVE_SIZE)
        if not chunk or len(received) > MAX_HEAD:
            return None
        received += chunk
    return received.split(END_OF_HEAD, 1)[0]


def serve_one_request(sock: socket.socket) -> None:
    """The blocking servers' whole job for one accepted connection: one request, one answer, close."""
    with sock:
        try:
            head = read_head(sock)
            if head is not None:
                sock.sendall(response(head, keep_alive=False))
        except OSError:
            pass  # the client went away: nothing to answer


class Connection:
    """One client of an event-loop server: bytes received but not yet parsed, bytes to send."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.received = bytearray()
        self.to_send = bytearray()
        self.close_after_sending = False
        self.closed = False

    def receive(self) -> None:
        """Reads what is there (never waits) and queues an answer for every complete request."""
        try:
            chunk = self.sock.recv(RECEIVE_SIZE)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.close()
            return
        self.received += chunk
        while not self.close_after_sending:
            end = self.received.find(END_OF_HEAD)
            if end < 0:
                break
            head = bytes(self.received[:end])
            del self.received[: end + len(END_OF_HEAD)]
            self.close_after_sending = client_wants_close(head)
            self.to_send += response(head, keep_alive=not self.close_after_sending)
        if len(self.received) > MAX_HEAD:
            self.close()

    def flush(self) -> None:
        """Sends as much as the socket takes now; closes once everything is sent, if asked to."""
        try:
            sent = self.sock.send(self.to_send) if self.to_send else 0
        except BlockingIOError:
            return
        except OSError:
            self.close()
            return
        del self.to_send[:sent]
        if not self.to_send and self.close_after_sending:
            self.close()

    @property
    def wants_to_send(self) -> bool:
        return bool(self.to_send)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.sock.close()


def listen(port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket; the backlog is deep so that bursts of connections wait instead of failing."""
    return socket.create_server((host, port), backlog=1024)


def arguments(description: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("port", type=int)
    parser.add_argument("host", nargs="?", default="127.0.0.1")
    parsed = parser.parse_args()
    return parsed.port, parsed.host
