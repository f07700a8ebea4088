"""`rush.Cache`: a route's answers kept by the worker and served natively.

A route registered with ``cache=Cache(ttl=600, vary_query=["arch"])`` has
its answers stored per worker (bounded by bytes) and answered again in Rust,
without calling the handler, until ``ttl`` seconds have passed. The key is
the route plus exactly the named query parameters and header fields;
anything else in the request does not split the cache. What is stored, what
bypasses it and how it is bounded is described in src/cache.rs and the
README. ``app.cache`` clears or invalidates the current worker's entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rush.config import parse_size

if TYPE_CHECKING:
    from rush._rush import Router

# 2xx statuses whose answers may be stored unless a Cache lists others.
DEFAULT_STATUSES = (200, 203, 204, 206)


@dataclass(frozen=True)
class Cache:
    """How a route's answers are cached: for ``ttl`` seconds, keyed on the
    ``vary_query`` parameters and ``vary_headers`` fields, for the listed
    ``statuses``; ``max_bytes`` bounds the worker's whole cache (the largest
    value of all routes applies)."""

    ttl: float
    vary_query: Sequence[str] = ()
    vary_headers: Sequence[str] = ()
    statuses: Sequence[int] = DEFAULT_STATUSES
    max_bytes: int | str = "64M"
    max_bytes_value: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        if not (isinstance(self.ttl, (int, float)) and 0 < self.ttl <= 86400):
            raise ValueError(f"Cache ttl must be a number of seconds above 0 and at most 86400 (got {self.ttl!r})")
        size = parse_size(self.max_bytes) if isinstance(self.max_bytes, str) else int(self.max_bytes)
        if size <= 0:
            raise ValueError(f"Cache max_bytes must be positive (got {self.max_bytes!r})")
        object.__setattr__(self, "max_bytes_value", size)
        for status in self.statuses:
            if not 200 <= status <= 599:
                raise ValueError(f"Cache statuses are final statuses, 200-599 (got {status})")

    def native(self) -> tuple[float, list[str], list[str], list[int]]:
        """The policy as the native router takes it."""
        return (
            float(self.ttl),
            list(self.vary_query),
            [name.lower() for name in self.vary_headers],
            list(self.statuses),
        )


class CacheControl:
    """``app.cache``: the running worker's cached answers."""

    def __init__(self) -> None:
        self._router: Router | None = None

    def attach(self, router: Router) -> None:
        self._router = router

    def clear(self) -> None:
        """Drops every cached answer of this worker."""
        if self._router is not None:
            self._router.cache_invalidate(None)

    def invalidate(self, pattern: str) -> None:
        """Drops the cached answers of the route(s) registered on ``pattern``."""
        if self._router is not None:
            self._router.cache_invalidate(pattern)

    def stats(self) -> dict[str, int]:
        """Entries, bytes, hits and misses of this worker's cache."""
        if self._router is None:
            return {"entries": 0, "bytes": 0, "hits": 0, "misses": 0}
        entries, size, hits, misses = self._router.cache_stats()
        return {"entries": entries, "bytes": size, "hits": hits, "misses": misses}
