"""An exact number of absolute-form requests through a forward proxy, for counting its work.

wrk runs for a time, and h2load cannot send absolute-form targets; counting a proxy's
syscalls or instructions per request needs a load that sends exactly N requests and checks
every answer. This one keeps CONNECTIONS keep-alive connections to the proxy, each with one
request in flight at a time (as wrk without pipelining), sends ``GET http://ORIGIN/PATH``
on them until N answers came back, and checks each: status 200, the expected body.

    python benches/profiles/proxy_load.py PROXY_PORT ORIGIN_PORT N [CONNECTIONS] [BODY]

It exits non-zero (after saying why) if any answer is not the expected one.
"""

from __future__ import annotations

import selectors
import socket
import sys


def run(proxy_port: int, origin_port: int, total: int, connections: int, body: bytes) -> int:
    request = (f"GET http://127.0.0.1:{origin_port}/ HTTP/1.1\r\nHost: 127.0.0.1:{origin_port}\r\n\r\n").encode()
    selector = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytearray] = {}
    sent = 0
    answered = 0
    for _ in range(min(connections, total)):
        sock = socket.create_connection(("127.0.0.1", proxy_port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(request)
        sent += 1
        buffers[sock] = bytearray()
        selector.register(sock, selectors.EVENT_READ)
    while answered < total:
        for key, _ in selector.select(timeout=30) or [(None, None)]:
            if key is None:
                print(f"no answer in 30 s after {answered} answers", file=sys.stderr)
                return 1
            sock = key.fileobj
            chunk = sock.recv(65536)
            if not chunk:
                print(f"the proxy closed a connection after {answered} answers", file=sys.stderr)
                return 1
            buffer = buffers[sock]
            buffer += chunk
            while True:
                end = buffer.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = bytes(buffer[:end]).split(b"\r\n")
                length = next(
                    (int(line.split(b":", 1)[1]) for line in head[1:] if line.lower().startswith(b"content-length:")),
                    None,
                )
                if length is None or len(buffer) < end + 4 + length:
                    break
                answer = bytes(buffer[end + 4 : end + 4 + length])
                del buffer[: end + 4 + length]
                if not head[0].startswith(b"HTTP/1.1 200 ") or answer != body:
                    print(f"unexpected answer: {head[0]!r} {answer[:80]!r}", file=sys.stderr)
                    return 1
                answered += 1
                if sent < total:
                    sock.sendall(request)
                    sent += 1
    for key in list(selector.get_map().values()):
        key.fileobj.close()
    return 0


if __name__ == "__main__":
    arguments = sys.argv[1:]
    sys.exit(
        run(
            int(arguments[0]),
            int(arguments[1]),
            int(arguments[2]),
            int(arguments[3]) if len(arguments) > 3 else 100,
            arguments[4].encode() if len(arguments) > 4 else b"Hello, World!",
        )
    )
