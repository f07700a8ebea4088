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
import signal

from minihttp import arguments, listen, serve_one_request


def serve(port: int, host: str) -> None:
    # Ignoring SIGCHLD tells the kernel to reap finished children itself: no zombies pile up.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    with listen(port, host) as listener:
        while True:
            connection, _ = listener.accept()
            if os.fork() == 0:
                # The child: it has its own copy of both sockets and needs only the connection.
                listener.close()
                serve_one_request(connection)
                os._exit(0)
            # The parent: the child owns the connection now; close our copy and accept the next.
            connection.close()


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
