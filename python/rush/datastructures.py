"""Multi-valued mappings for what a request carries: query parameters and headers.

Both keep every value in arrival order. ``m[name]`` and ``m.get(name)`` give
the first value, as most code expects; ``m.getlist(name)`` gives them all.
`Headers` compares names case-insensitively (RFC 9110 5.1). Requests build
these lazily, only when a handler reads ``request.query`` or
``request.headers``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TypeVar, overload

_Default = TypeVar("_Default")


class MultiMapping(Mapping[str, str]):
    """An immutable mapping that may hold several values per key."""

    __slots__ = ("_index", "_pairs")

    def __init__(self, pairs: Iterable[tuple[str, str]] = ()) -> None:
        self._pairs: list[tuple[str, str]] = list(pairs)
        self._index: dict[str, list[str]] = {}
        for name, value in self._pairs:
            self._index.setdefault(self._normalise(name), []).append(value)

    @staticmethod
    def _normalise(name: str) -> str:
        return name

    def __getitem__(self, name: str) -> str:
        return self._index[self._normalise(name)][0]

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: _Default) -> str | _Default: ...
    def get(self, name: str, default: object = None) -> object:
        values = self._index.get(self._normalise(name))
        return values[0] if values else default

    def getlist(self, name: str) -> list[str]:
        """Every value for ``name``, in the order received (empty if none)."""
        return list(self._index.get(self._normalise(name), ()))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._normalise(name) in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def multi_items(self) -> list[tuple[str, str]]:
        """Every (name, value) pair, duplicates included, in order."""
        return list(self._pairs)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, MultiMapping):
            return self._index == other._index
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._pairs!r})"


class QueryParams(MultiMapping):
    """Query-string parameters, percent-decoded, ``+`` as space."""

    __slots__ = ()


class Headers(MultiMapping):
    """Request header fields with case-insensitive names."""

    __slots__ = ()

    @staticmethod
    def _normalise(name: str) -> str:
        return name.lower()
