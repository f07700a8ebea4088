"""Thread pool, accept in the workers: a fixed pool of threads, each calling accept() on the shared
listening socket and answering what it accepted.

No queue and no hand-off: the kernel gives each new connection to one of the
threads blocked in accept(), and the thread that accepted it answers it. This
saves the queue's lock and one thread switch per request compared to
accepting in the main thread: the same trick as prefork, with threads instead
of processes (cheaper, but sharing one GIL, so eight threads waking up for
connections contend for it). Each thread serves one connection at a time and
closes it after the answer.
"""

import threading

from minihttp import arguments, listen, serve_one_request

THREADS = 8


def worker(listener) -> None:
    while True:
        connection, _ = listener.accept()
        serve_one_request(connection)


def serve(port: int, host: str) -> None:
    listener = listen(port, host)
    threads = [threading.Thread(target=worker, args=(listener,), daemon=True) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
