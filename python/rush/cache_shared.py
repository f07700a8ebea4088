"""The response cache's optional second level, shared by machines: Redis.

``Cache(..., shared="redis://127.0.0.1:6379/0")`` keeps the worker's own
cache in front; on a miss there the native side asks this level (``get``)
before calling the handler, and gives it every answer it stores (``set``).
Names come from the native key (src/cache/key.rs, ``shared_name``): hex,
``ENTRY:REST``, under the prefix ``rush:NAMESPACE:``, so an invalidation
drops a route's or an entry's names by prefix (``invalidate``) and touches
no other app's. The namespace is the ``Cache``'s ``namespace=``, by default
the app's import string and a digest of the absolute path of the file that
defines it (``main:app@3f2a9c1b0d4e``): the import string alone is shared by
every project that serves ``main:app``, the path is not, so two apps sharing
one Redis never read each other's answers while one app served by several
servers from the same directory shares. A release whose answers differ from
the one before it for the same request (a rolling deploy), or one app
deployed at different paths, names its own namespace.

Redis being down must never take the route down: every call has a short
timeout, a failure is logged once, and the level is then skipped for a few
seconds (the route is served uncached at this level) before it is tried
again. The client is made in the worker, after the fork, on first use.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from typing import TYPE_CHECKING

from rush import logs

if TYPE_CHECKING:
    import redis

# How long one Redis call may take: a cache that is slower than the
# handler is worse than none.
CALL_TIMEOUT = 0.25
# After a failure, the level is skipped for this long.
RETRY_AFTER = 5.0
# Names are deleted in batches of this many during an invalidation.
SCAN_BATCH = 500


class RedisLevel:
    """A Redis database as the cache's shared level (see the module's doc)."""

    def __init__(self, url: str, namespace: str) -> None:
        self.url = url
        self.namespace = namespace
        self.prefix = f"rush:{namespace}:"
        self._client: redis.Redis | None = None
        self._skip_until = 0.0
        self._failing = False

    def _redis(self) -> redis.Redis | None:
        if time.monotonic() < self._skip_until:
            return None
        if self._client is None:
            import redis

            self._client = redis.Redis.from_url(
                self.url, socket_timeout=CALL_TIMEOUT, socket_connect_timeout=CALL_TIMEOUT
            )
        return self._client

    def _failed(self, error: Exception) -> None:
        if not self._failing:
            logs.error_logger.warning(
                "the shared cache %s failed (%s); serving without it, retrying every %.0f s",
                self.url,
                error,
                RETRY_AFTER,
            )
        self._failing = True
        self._skip_until = time.monotonic() + RETRY_AFTER

    def _recovered(self) -> None:
        if self._failing:
            logs.error_logger.warning("the shared cache %s answers again", self.url)
            self._failing = False

    def get(self, name: str) -> bytes | None:
        """The stored response for a native key name, if Redis has it."""
        client = self._redis()
        if client is None:
            return None
        try:
            found = client.get(self.prefix + name)
        except Exception as error:  # noqa: BLE001 - any failure of the level only costs the level
            self._failed(error)
            return None
        self._recovered()
        return found  # type: ignore[return-value]

    def set(self, name: str, response: bytes, ttl: float) -> None:
        """Stores a response the handler gave, for ``ttl`` seconds."""
        client = self._redis()
        if client is None or ttl <= 0:
            return
        try:
            client.set(self.prefix + name, response, px=max(1, int(ttl * 1000)))
        except Exception as error:  # noqa: BLE001 - see get()
            self._failed(error)
            return
        self._recovered()

    def invalidate(self, prefixes: list[str]) -> None:
        """Drops every name under each prefix ("" drops all of this app's)."""
        client = self._redis()
        if client is None:
            return
        try:
            for prefix in prefixes:
                batch = []
                for name in client.scan_iter(match=f"{self.prefix}{prefix}*", count=SCAN_BATCH):
                    batch.append(name)
                    if len(batch) >= SCAN_BATCH:
                        client.delete(*batch)
                        batch = []
                if batch:
                    client.delete(*batch)
        except Exception as error:  # noqa: BLE001 - see get()
            self._failed(error)


_levels: dict[tuple[str, str], RedisLevel] = {}

#: The namespace of a ``Cache`` that names none (see the module's doc), set
#: by the worker before it builds the router (set_default_namespace).
_default_namespace = "app"


def app_namespace(label: str, module_name: str, app_dir: str) -> str:
    """The default namespace of an app: ``label`` (its import string) and a
    digest of where it lives, the absolute path of ``module_name``'s file
    (or ``app_dir``'s, for a module without one). A digest rather than the
    path itself keeps names short and free of Redis's glob characters, which
    an invalidation's ``SCAN MATCH`` would read as patterns."""
    where = getattr(sys.modules.get(module_name), "__file__", None) or app_dir
    digest = hashlib.sha256(os.path.abspath(where).encode()).hexdigest()[:12]
    return f"{label}@{digest}"


def set_default_namespace(namespace: str) -> None:
    """The namespace of every shared level whose ``Cache`` names none."""
    global _default_namespace
    _default_namespace = namespace


def level_for(url: str, namespace: str | None = None) -> RedisLevel:
    """The worker's level for ``url`` and ``namespace`` (one client per
    pair and process; the default namespace when None)."""
    if not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"Cache shared= takes a redis:// URL (got {url!r})")
    namespace = namespace or _default_namespace
    if (url, namespace) not in _levels:
        _levels[(url, namespace)] = RedisLevel(url, namespace)
    return _levels[(url, namespace)]


def all_levels() -> list[RedisLevel]:
    return list(_levels.values())
