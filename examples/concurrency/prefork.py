"""Prefork: fork a fixed number of worker processes up front; each runs the blocking accept loop.

This is Apache's prefork model (and gunicorn's sync workers). The fork
happens once, at start-up, not per request, and the workers share the
listening socket: the kernel hands each new connection to one worker that is
waiting in accept(). A crash takes down one worker, not the server, and on a
machine with several cores the workers really run in parallel (each process
has its own GIL).

The number of workers is the number of requests served at once: a ninth slow
client waits for one of eight busy workers. Each worker holds a whole process
worth of memory, so the count cannot grow much. Each request is answered with
``Connection: close``, as a kept-alive client would keep a worker to itself.
"""

import os
import signal
import sys

from minihttp import arguments, listen, serve_one_request

WORKERS = 4


def worker(listener) -> None:
    while True:
        connection, _ = listener.accept()
        serve_one_request(connection)


def serve(port: int, host: str) -> None:
    listener = listen(port, host)
    children = []
    for _ in range(WORKERS):
        pid = os.fork()
        if pid == 0:
            # Back to the default, so the parent's handler below is not inherited.
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            worker(listener)
            os._exit(0)
        children.append(pid)

    def stop(signum, frame):
        # The workers are ours to stop: the parent only supervises, and exits after them.
        for pid in children:
            os.kill(pid, signal.SIGTERM)
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for _ in children:
        os.wait()


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
