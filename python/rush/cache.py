"""`rush.Cache`: a route's answers kept by the worker and served natively.

A route registered with ``cache=Cache(ttl=600, vary_query=["arch"])`` has
its answers stored per worker (bounded by bytes) and answered again in Rust,
without calling the handler, until ``ttl`` seconds have passed. The key is
the route plus exactly the named query parameters and header fields;
anything else in the request does not split the cache. Concurrent misses of
one key call the handler once (the others wait up to ``lock_timeout``);
``stale`` seconds past the TTL an answer is still served while one request
refreshes it, or when the refresh fails. What is stored, what bypasses it
and how it is bounded is described in src/cache/ and the README.

A WSGI or ASGI app gets the same cache per path, without code changes:
``--cache "/nas/:ttl=600,vary_query=arch|build"`` (:func:`parse_cache_spec`).

``app.cache`` (a rush App) or ``rush.cache.worker_cache`` (any app) clears
or invalidates entries, in every worker of the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rush.cache_shared import RedisLevel, all_levels, level_for
from rush.values import parse_size

if TYPE_CHECKING:
    from rush._rush import CacheHandle, Router

# 2xx statuses whose answers may be stored unless a Cache lists others (a 206 never is:
# a part is not the resource).
DEFAULT_STATUSES = (200, 203, 204)


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
    #: Seconds past ``ttl`` an answer is still served while one request
    #: refreshes it, and instead of a refresh that fails (5xx or an exception).
    stale: float = 0
    #: Seconds concurrent misses of one key wait for the first one's answer
    #: before they call the handler themselves.
    lock_timeout: float = 5
    #: Requests with ``Authorization`` or ``Cookie`` use the cache too (the
    #: answers do not depend on who asks); by default they bypass it.
    allow_credentials: bool = False
    #: A second level shared by machines: ``redis://HOST:PORT/DB``
    #: (python/rush/cache_shared.py). The worker's cache stays in front.
    shared: str | None = None
    #: The shared level's namespace: names are ``rush:NAMESPACE:...``, and
    #: ``clear()``/``invalidate()`` touch only this namespace. By default the
    #: app's import string and a digest of its module's absolute path
    #: (``main:app@3f2a9c1b0d4e``); give each release its own when its
    #: answers differ from the previous one's during a rolling deploy, and
    #: name one when the same app runs from different paths on different
    #: machines and should still share.
    namespace: str | None = None
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
        for name in ("stale", "lock_timeout"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 <= value <= 86400):
                raise ValueError(f"Cache {name} must be a number of seconds from 0 to 86400 (got {value!r})")
        if self.shared is not None and not str(self.shared).startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"Cache shared= takes a redis:// URL (got {self.shared!r})")
        if self.namespace is not None and (not self.namespace or any(c in self.namespace for c in "*?[]")):
            raise ValueError(f"Cache namespace= is a non-empty name without glob characters (got {self.namespace!r})")
        for name in ("vary_query", "vary_headers"):
            if isinstance(getattr(self, name), str):
                raise ValueError(f"Cache {name} is a list of names, not a string")

    def shared_level(self) -> RedisLevel | None:
        """This worker's client of the shared level, if the policy has one."""
        return level_for(self.shared, self.namespace) if self.shared else None

    def native(self) -> tuple[float, list[str], list[str], list[int], float, float, bool]:
        """The policy as the native router takes it."""
        return (
            float(self.ttl),
            list(self.vary_query),
            [name.lower() for name in self.vary_headers],
            list(self.statuses),
            float(self.stale),
            float(self.lock_timeout),
            bool(self.allow_credentials),
        )


_LIST_FIELDS = {"vary_query", "vary_headers", "statuses"}
_NUMBER_FIELDS = {"ttl", "stale", "lock_timeout"}
_TEXT_FIELDS = {"max_bytes", "shared", "namespace"}


def parse_cache_spec(spec: str) -> tuple[str, Cache]:
    """``PATH:ttl=600,vary_query=a|b,vary_headers=host,stale=30`` as given to
    ``--cache``: the path (``/prefix/*`` for every path under a prefix) and
    its `Cache`. Lists are separated by ``|``; ``max_bytes`` takes sizes like
    ``64M``; ``allow_credentials`` takes true/false."""
    path, separator, options = spec.partition(":")
    if not separator or not path.startswith("/"):
        raise ValueError(f"--cache takes PATH:ttl=SECONDS[,OPTION=VALUE...], e.g. /nas/:ttl=600 (got {spec!r})")
    fields: dict[str, object] = {}
    known = _LIST_FIELDS | _NUMBER_FIELDS | _TEXT_FIELDS | {"allow_credentials"}
    for item in filter(None, (part.strip() for part in options.split(","))):
        name, equals, value = item.partition("=")
        if not equals or name not in known:
            raise ValueError(f"--cache option {item!r} is not one of {', '.join(sorted(known))} (in {spec!r})")
        try:
            if name in _LIST_FIELDS:
                values = [part for part in value.split("|") if part]
                fields[name] = [int(part) for part in values] if name == "statuses" else values
            elif name in _NUMBER_FIELDS:
                fields[name] = float(value)
            elif name == "allow_credentials":
                fields[name] = value.lower() in ("1", "true", "yes", "on")
            else:
                fields[name] = value
        except ValueError:
            raise ValueError(f"--cache option {item!r} has a bad value (in {spec!r})") from None
    if "ttl" not in fields:
        raise ValueError(f"--cache needs ttl=SECONDS (in {spec!r})")
    return path, Cache(**fields)  # type: ignore[arg-type]


class CacheControl:
    """``app.cache``: the running worker's cached answers. Safe to use from
    any thread (a WSGI app's pool threads): invalidation changes counters
    shared by every worker, and the statistics are atomics."""

    def __init__(self) -> None:
        self._handle: CacheHandle | None = None

    def attach(self, router: Router) -> None:
        """Called by the worker once the router has all its routes."""
        self._handle = router.cache_handle()

    def clear(self) -> None:
        """Drops every cached answer, in every worker (and shared level)."""
        if self._handle is not None:
            _drop_shared(self._handle.invalidate(None))

    def invalidate(self, pattern: str, **query: str | Sequence[str]) -> None:
        """Drops the cached answers of the route (or ``--cache`` path)
        registered on ``pattern``, in every worker; with ``query``, only the
        answers for exactly these values of the route's ``vary_query``
        parameters (e.g. ``invalidate("/nas/", arch="x86", build="1")``),
        whatever headers they varied on."""
        if self._handle is None:
            return
        if not query:
            _drop_shared(self._handle.invalidate(pattern))
            return
        pairs = [
            (name, str(value))
            for name, values in query.items()
            for value in ([values] if isinstance(values, str) else values)
        ]
        _drop_shared(self._handle.invalidate(pattern, pairs))

    def stats(self) -> dict[str, int]:
        """This worker's cache: entries, bytes, hits, stale_hits, misses,
        coalesced (requests that waited for another's answer), evictions
        and fills in progress."""
        if self._handle is None:
            return {}
        return dict(self._handle.stats())


def _drop_shared(prefixes: list[str]) -> None:
    """An invalidation reaches the shared levels too (by name prefix)."""
    for level in all_levels():
        level.invalidate(prefixes)


#: The cache of the app this worker serves, whatever its interface: a WSGI
#: or ASGI app with ``--cache`` paths invalidates through it.
worker_cache = CacheControl()
