"""Thread pool, accept in the main thread: the main thread accepts and queues connections; a fixed
pool of threads takes them from the queue and answers them.

Threads are created once, so no request pays for one, and the pool size
bounds the memory a burst of clients can take: the extra connections wait in
the queue instead of becoming threads. The queue is the one shared structure
(``queue.Queue`` does its own locking).

Every connection goes through a hand-off: the main thread puts it in the
queue and wakes a worker, which costs a lock and a thread switch per request
(and on one core, a context switch). As in every blocking model, a worker
serves one connection at a time and closes it after the answer.
"""

import queue
import threading

from minihttp import arguments, listen, serve_one_request

THREADS = 8


def worker(connections: queue.Queue) -> None:
    while True:
        serve_one_request(connections.get())


def serve(port: int, host: str) -> None:
    connections: queue.Queue = queue.Queue()
    for _ in range(THREADS):
        threading.Thread(target=worker, args=(connections,), daemon=True).start()
    with listen(port, host) as listener:
        while True:
            connection, _ = listener.accept()
            connections.put(connection)


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
