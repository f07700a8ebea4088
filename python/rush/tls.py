"""TLS state the supervisor makes before it forks and its workers use.

The session-ticket keys (src/tls_tickets.rs): one page of keys shared by
every worker, so a client resumes its TLS session with whichever worker its
next connection reaches. The supervisor makes them (:func:`share_ticket_keys`)
and rotates them from its loop (:func:`rotate_when_due`); a forked worker
finds them in :data:`ticket_keys` and hands them to its `TlsSettings`.
"""

from __future__ import annotations

import time

from rush._rush import TicketKeys

#: The shared keys, once the supervisor made them (None: each worker keeps its own).
ticket_keys: TicketKeys | None = None
_next_rotation = 0.0


def share_ticket_keys() -> TicketKeys:
    """Makes the shared keys (before forking); idempotent."""
    global ticket_keys, _next_rotation
    if ticket_keys is None:
        ticket_keys = TicketKeys()
        _next_rotation = time.monotonic() + TicketKeys.rotation_seconds()
    return ticket_keys


def rotate_when_due(now: float) -> None:
    """Draws a new key once a rotation period has passed (the supervisor's loop)."""
    global _next_rotation
    if ticket_keys is not None and now >= _next_rotation:
        ticket_keys.rotate()
        _next_rotation = now + TicketKeys.rotation_seconds()
