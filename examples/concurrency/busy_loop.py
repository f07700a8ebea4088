"""Non-blocking busy loop: every socket in non-blocking mode, and one thread that asks each of them,
over and over, "anything for me?".

Nothing blocks, so one thread serves every client at once, and connections
can stay alive (and requests be pipelined): a client that sends nothing just
gets skipped. But the loop never rests: with nothing to do it still spins
through accept() and recv() calls that fail with EAGAIN, burning a whole core
at 100%, and the more connections are open the longer each round takes, idle
ones included. Waiting well is the operating system's job: see select_loop.py
and epoll_loop.py.
"""

from minihttp import Connection, arguments, listen


def serve(port: int, host: str) -> None:
    listener = listen(port, host)
    listener.setblocking(False)
    connections: list[Connection] = []
    while True:
        try:
            sock, _ = listener.accept()
            connections.append(Connection(sock))
        except BlockingIOError:
            pass  # no one is connecting: go and ask the connections instead
        for connection in connections:
            connection.receive()
            if connection.wants_to_send:
                connection.flush()
        connections = [connection for connection in connections if not connection.closed]


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
