"""epoll: one thread, non-blocking sockets, and Linux's epoll to sleep until some socket is ready.

The same event loop as select_loop.py, with the bookkeeping moved into the
kernel: each socket is registered once (with what we wait for: reading, or
also writing while a response is pending), and each epoll.poll() returns only
the sockets that are ready. Its cost depends on how many sockets are *ready*,
not on how many are *open*, so ten thousand idle keep-alive connections cost
nothing, and there is no 1024 limit.

This is the model of nginx, of every asyncio loop on Linux, and of rush: rush
runs this loop in Rust, one worker process per core, answering without
touching Python where it can. What Python adds on top is measured by the
difference between this file and rush in the concurrency-models benchmark.
"""

import select

from minihttp import Connection, arguments, listen

READ = select.EPOLLIN
READ_WRITE = select.EPOLLIN | select.EPOLLOUT


def serve(port: int, host: str) -> None:
    listener = listen(port, host)
    listener.setblocking(False)
    poller = select.epoll()
    poller.register(listener.fileno(), READ)
    connections: dict[int, Connection] = {}  # file descriptor -> Connection
    while True:
        for fd, events in poller.poll():
            if fd == listener.fileno():
                try:
                    client, _ = listener.accept()
                except BlockingIOError:
                    continue
                connections[client.fileno()] = Connection(client)
                poller.register(client.fileno(), READ)
                continue
            connection = connections[fd]
            if events & (select.EPOLLIN | select.EPOLLHUP | select.EPOLLERR):
                connection.receive()
            if not connection.closed and events & select.EPOLLOUT:
                connection.flush()
            if connection.closed:
                # Closing the socket removed it from epoll already; forget it here too.
                del connections[fd]
                continue
            # Ask for writability only while there is something to write: otherwise epoll would
            # report the (almost always writable) socket on every poll.
            if connection.wants_to_send:
                connection.flush()  # usually everything goes out at once, with no extra poll
            poller.modify(fd, READ_WRITE if connection.wants_to_send else READ)


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
