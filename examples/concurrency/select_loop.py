"""select: one thread, non-blocking sockets, and select() to sleep until some socket is ready.

This is I/O multiplexing: the kernel tells us which sockets can be read or
written, and we touch only those. One thread serves every client at once,
connections stay alive, and an idle server sleeps instead of spinning.

select() has two costs that grow with the number of connections: every call
passes the full list of sockets to the kernel and back, and the kernel scans
all of them, even if only one is ready. It is also limited to file
descriptors below FD_SETSIZE (1024): a server with 1000 clients is at its
edge. epoll_loop.py removes both limits.
"""

import select

from minihttp import Connection, arguments, listen


def serve(port: int, host: str) -> None:
    listener = listen(port, host)
    listener.setblocking(False)
    connections: dict = {}  # socket -> Connection
    while True:
        readers = [listener, *connections]
        writers = [sock for sock, connection in connections.items() if connection.wants_to_send]
        readable, writable, _ = select.select(readers, writers, [])
        for sock in readable:
            if sock is listener:
                try:
                    client, _ = listener.accept()
                except BlockingIOError:
                    continue  # another waiter took it first
                connections[client] = Connection(client)
            else:
                connections[sock].receive()
        for sock in writable:
            if sock in connections:
                connections[sock].flush()
        # Sockets whose client is done: forget them (the connection closed its socket already).
        for sock in [sock for sock, connection in connections.items() if connection.closed]:
            del connections[sock]


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
