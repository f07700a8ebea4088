"""Fork per request: the main process accepts, and forks a child process to answer each connection.

This is how CGI and the classic inetd servers worked. Every request is
isolated in a process of its own: a crash or a memory leak dies with the
child, and a slow client blocks only its own child, never the accept loop.

The price is fork(): copying the process table entries, page tables and
file descriptors, and tearing it all down again, for every single request.
That costs far more than answering "Hello, World!", so this model is slow by
orders of magnitude, and under load the machine spends its time creating and
reaping processes. Like every blocking model here, the child answers one
request and closes (``Connection: close``).
"""

import os

from minihttp import arguments, listen, serve_one_request


def reap_finished_children() -> None:
    """Collects the exit status of every child that has finished, without waiting for the others:
    a finished child that nobody waits for stays in the process table as a zombie."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # no children at all
        if pid == 0:
            return  # children left, all still running


def serve(port: int, host: str) -> None:
    with listen(port, host) as listener:
        while True:
            connection, _ = listener.accept()
            # Once per accepted connection: zombies never outnumber the connections in flight.
            reap_finished_children()
            if os.fork() == 0:
                # The child: it has its own copy of both sockets and needs only the connection.
                listener.close()
                serve_one_request(connection)
                os._exit(0)
            # The parent: the child owns the connection now; close our copy and accept the next.
            connection.close()


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
