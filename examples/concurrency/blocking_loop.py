"""Blocking single loop: accept a connection, answer it, close it, accept the next.

The simplest server there is, and a correct one: one thread, no shared state,
no locks. Its weakness is that everything waits on everything. While it reads
one client's request (``recv`` blocks until the bytes arrive), no other
client is accepted; a slow client stalls all the others. It cannot keep
connections alive either: a kept-alive client would hold the only thread and
starve everyone else, so every response says ``Connection: close`` and every
request pays for a new TCP connection.

Under a benchmark with fast clients on loopback it does surprisingly well,
because nothing ever blocks for long and no CPU goes to switching between
threads or processes. On a real network, one slow phone on a bad link is
enough to make it unusable.
"""

from minihttp import arguments, listen, serve_one_request


def serve(port: int, host: str) -> None:
    with listen(port, host) as listener:
        while True:
            connection, _ = listener.accept()
            serve_one_request(connection)


if __name__ == "__main__":
    serve(*arguments(__doc__.splitlines()[0]))
