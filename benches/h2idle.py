"""Idle HTTP/2 connections for the http2 group's memory scenarios, held while the runner reads RSS.

``python -m benches.h2idle --url http://H:P/ --connections N [--status 200] [--sha256 HEX]``
speaks h2c with prior knowledge through the ``h2`` library (the protocol state machine: preface,
SETTINGS and their acknowledgements, HPACK, flow control) over plain blocking sockets, one
connection after the other, and talks with the runner in the line protocol of
benches/wsclient.py:

1. opens ``--warm`` connections (10), each after one complete request (a GET of ``--url``'s
   path whose status, and body digest if given, must be right); prints ``warm``;
2. waits for a line on stdin (the runner reads the server's RSS meanwhile);
3. opens ``--connections`` more the same way; prints ``ready N``;
4. waits for stdin to end (the runner reads the RSS again), then checks that the server kept
   every connection open (no GOAWAY, no close: a server that drops idle connections would
   otherwise look frugal), closes them, and prints a JSON line
   ``{"ok": ..., "connections": N, "errors": [...]}`` (exit status 1 when not ok).

One request per connection is the honest idle state: a connection that never carried a stream
may not yet hold what a used one keeps (buffers, HPACK tables, the request's per-stream state
that must have been freed). Sequential opening keeps this client simple; a thousand connections
open in a second or two on loopback.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import socket
import sys
from urllib.parse import urlsplit

TIMEOUT_S = 10.0


class IdleCheckFailed(Exception):
    """A connection could not be opened, or its one answer was wrong."""


class HeldConnection:
    """One h2c connection: opened, one request answered, then left idle."""

    def __init__(self, host: str, port: int, path: str) -> None:
        import h2.config
        import h2.connection

        self.sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.authority = f"{host}:{port}"
        self.path = path

    def close(self) -> None:
        self.sock.close()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def get(self) -> tuple[int, bytes]:
        """Sends ``GET path`` on a new stream, reads until it ends; returns (status, body)."""
        import h2.events

        stream_id = self.h2.get_next_available_stream_id()
        headers = [(":method", "GET"), (":scheme", "http"), (":authority", self.authority), (":path", self.path)]
        self.h2.send_headers(stream_id, headers, end_stream=True)
        self._flush()
        status, body = 0, b""
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise IdleCheckFailed("the server closed the connection before answering")
            for event in self.h2.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream_id:
                    status = int(dict(event.headers)[":status"])
                elif isinstance(event, h2.events.DataReceived) and event.stream_id == stream_id:
                    body += event.data
                    self.h2.acknowledge_received_data(event.flow_controlled_length, stream_id)
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                    raise IdleCheckFailed(f"the stream was reset (error code {event.error_code})")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise IdleCheckFailed(f"GOAWAY before the answer (error code {event.error_code})")
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                    self._flush()  # SETTINGS and WINDOW_UPDATE acknowledgements
                    return status, body
            self._flush()

    def still_open(self) -> bool:
        """Whether the server kept the connection: no close and no GOAWAY waiting to be read (a
        PING or SETTINGS frame it sent meanwhile is fine)."""
        import h2.events

        self.sock.setblocking(False)
        received = b""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return False
                received += data
        except BlockingIOError:
            pass
        except OSError:
            return False
        events = self.h2.receive_data(received) if received else []
        return not any(isinstance(event, h2.events.ConnectionTerminated) for event in events)


def open_connections(url: str, count: int, status: int, sha256: str | None) -> list[HeldConnection]:
    """``count`` connections, each after one right answer; raises IdleCheckFailed on the first wrong one."""
    parts = urlsplit(url)
    host, port, path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/"
    held: list[HeldConnection] = []
    try:
        for _ in range(count):
            connection = HeldConnection(host, port, path)
            held.append(connection)
            answer_status, body = connection.get()
            if answer_status != status:
                raise IdleCheckFailed(f"GET {path}: status {answer_status}, expected {status}")
            if sha256 and hashlib.sha256(body).hexdigest() != sha256:
                raise IdleCheckFailed(f"GET {path}: a body of {len(body)} bytes that is not the expected one")
    except Exception:
        for connection in held:
            connection.close()
        raise
    return held


def hold(url: str, connections: int, warm: int, status: int, sha256: str | None) -> int:
    errors: list[str] = []
    held: list[HeldConnection] = []
    opened = 0
    try:
        held = open_connections(url, warm, status, sha256)
        print("warm", flush=True)
        sys.stdin.readline()
        more = open_connections(url, connections, status, sha256)
        held += more
        opened = len(more)
        print(f"ready {opened}", flush=True)
        sys.stdin.read()  # until the runner closes stdin, having read the RSS
        dropped = sum(not connection.still_open() for connection in held)
        if dropped:
            errors.append(f"the server closed {dropped} of {len(held)} idle connections while they were held")
    except (IdleCheckFailed, OSError, ValueError, KeyError) as error:
        errors.append(f"{type(error).__name__}: {error}")
    finally:
        for connection in held:
            connection.close()
    ok = not errors and opened == connections
    print(json.dumps({"ok": ok, "connections": opened, "errors": errors}), flush=True)
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benches.h2idle", description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True, help="http://host:port/path, asked once on each connection")
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--warm", type=int, default=10)
    parser.add_argument("--status", type=int, default=200, help="the status each answer must have")
    parser.add_argument("--sha256", help="the SHA-256 each answer's body must have")
    arguments = parser.parse_args(argv)
    return hold(arguments.url, arguments.connections, arguments.warm, arguments.status, arguments.sha256)


if __name__ == "__main__":
    sys.exit(main())
