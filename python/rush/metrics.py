"""``--metrics HOST:PORT``: Prometheus text served by the supervisor,
summed over the workers.

The workers count natively into memory they share with the supervisor
(src/metrics.rs, `MetricsTable`, one block per worker slot, made here
before the first fork). The supervisor owns a small listening socket in
its own poll loop: each connection gets the rendered table plus what only
the supervisor knows (worker exits by cause) and is closed. It answers any
GET path; the exposition is small and scrapes are rare, so one blocking
write with a short timeout per scrape is enough.
"""

from __future__ import annotations

import socket
from collections import Counter

from rush import logs
from rush._rush import MetricsTable
from rush.config import Config

# A scraper that does not send its request or read the answer in this time
# is dropped: the supervisor must not wait on it.
SCRAPE_TIMEOUT = 2.0

table: MetricsTable | None = None


def count_into_slot(index: int) -> None:
    """In a freshly forked worker: count into slot ``index``'s block."""
    if table is not None:
        table.use_slot(index)


class MetricsEndpoint:
    """The supervisor's metrics listener (see the module's doc)."""

    def __init__(self, config: Config, slots: int) -> None:
        global table
        host, _, port = str(config.metrics).rpartition(":")
        table = MetricsTable(slots)
        self.table = table
        self.exits: Counter[str] = Counter()
        family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
        self.listener = socket.socket(family, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind((host.strip("[]") or "127.0.0.1", int(port)))
        self.listener.listen(16)
        self.listener.setblocking(False)
        logs.error_logger.info("metrics on http://%s:%s/metrics", host or "127.0.0.1", port)

    def fileno(self) -> int:
        return self.listener.fileno()

    def worker_exited(self, cause: str) -> None:
        self.exits[cause] += 1

    def render(self) -> str:
        lines = [
            "# HELP rush_worker_exits_total Worker processes that exited, by cause.",
            "# TYPE rush_worker_exits_total counter",
        ]
        lines += [f'rush_worker_exits_total{{cause="{cause}"}} {count}' for cause, count in sorted(self.exits.items())]
        return self.table.render() + "\n".join(lines) + "\n"

    def serve(self) -> None:
        """Answers the connections waiting on the listener."""
        while True:
            try:
                connection, _ = self.listener.accept()
            except BlockingIOError:
                return
            with connection:
                connection.settimeout(SCRAPE_TIMEOUT)
                try:
                    request = connection.recv(8192)
                    if not request.startswith(b"GET "):
                        connection.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                        continue
                    body = self.render().encode()
                    head = (
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
                        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                    )
                    connection.sendall(head.encode() + body)
                except OSError:
                    continue

    def close(self) -> None:
        self.listener.close()
