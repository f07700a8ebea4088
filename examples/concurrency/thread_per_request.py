"""Thread per request: the main thread accepts, and starts a new thread to answer each connection.

A thread is much cheaper to create than a process (no copy of the address
space), and a slow client blocks only its own thread. Threads share memory,
so the code they run must be safe to run concurrently; here nothing is
shared, so there is nothing to lock.

It still pays for a thread's creation and destruction on every request, and
nothing bounds the number of threads: a burst of a thousand slow clients
makes a thousand threads, each with its own stack. In CPython the threads
also take turns holding the GIL, so they never run Python code in parallel:
threads help with waiting, not with computing. Each thread answers one request
and closes the connection.
"""

import threading

from minihttp import arguments, listen, serve_one_request


def serve(port: int, host: str) -> None:
    with listen(port, host) as listener:
        while True:
            connection, _ = listener.accept()
            threading.Thread(target=serve_one_request, args=(connection,), daemon=True).start()


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
