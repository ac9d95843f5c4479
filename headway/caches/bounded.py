"""The one building block of every cache: entries by key, held longest first, within a
bound on how many and on how many bytes, and a generation that guards against storing
what a change overtook."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Bounded(Generic[K, V]):
    """At most `count` entries and `max_bytes` bytes (each as `size` counts it; None: no
    bound of that kind). Past either, the entries held longest go until what is left is
    within `keep` of each bound (7/8: an eighth is freed at once, so that a full cache
    drops rarely, each drop walking past what the last left behind). `touch` makes an
    entry the newest (a cache of what was used last); `on_drop` hears each entry the
    bound pushed out.

    `generation` moves with every `forget`: a reader notes it before a read that may
    race a change, and `put` stores nothing if it moved meanwhile.
    """

    __slots__ = (
        "_count",
        "_entries",
        "_keep",
        "_max_bytes",
        "_on_drop",
        "_size",
        "bytes_held",
        "generation",
        "get",
    )

    def __init__(
        self,
        *,
        count: int | None = None,
        max_bytes: int | None = None,
        size: Callable[[V], int] | None = None,
        keep: float = 1.0,
        on_drop: Callable[[K, V], None] | None = None,
    ) -> None:
        self._entries: dict[K, V] = {}
        # The entry of a key, or None: the dict's own method (a cache read is the hot
        # path of every task shown, and a method of ours would add a call to each).
        self.get: Callable[[K], V | None] = self._entries.get
        self._count = count
        self._max_bytes = max_bytes
        self._size = size
        self._keep = keep
        self._on_drop = on_drop
        self.bytes_held = 0
        self.generation = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: K) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(self._entries)

    def items(self) -> Iterator[tuple[K, V]]:
        return iter(self._entries.items())

    def touch(self, key: K) -> V | None:
        """The entry, made the newest (it goes last); None if absent."""
        entries = self._entries
        value = entries.pop(key, None)
        if value is not None:
            entries[key] = value
        return value

    def put(self, key: K, value: V, generation: int | None = None) -> bool:
        """Hold `value` as the newest entry of `key` (replacing any), unless `generation`
        (noted before the read it came from) is no longer current; whether it is held.
        The bound may push out the oldest entries, even this one if it alone is over."""
        if generation is not None and generation != self.generation:
            return False
        self.pop(key)
        self._entries[key] = value
        if self._size is not None:
            self.bytes_held += self._size(value)
        self._trim()
        return True

    def grew(self, size: int) -> None:
        """An entry held changed its size by `size` bytes; the bound applies."""
        self.bytes_held += size
        if size > 0:
            self._trim()

    def pop(self, key: K) -> V | None:
        """Let go of `key`'s entry, if held (the generation stays)."""
        value = self._entries.pop(key, None)
        if value is not None and self._size is not None:
            self.bytes_held -= self._size(value)
        return value

    def forget(self, *keys: K | None) -> None:
        """After a change that made these entries stale: let go of them, and move the
        generation on (a read that raced the change stores nothing)."""
        self.generation += 1
        for key in keys:
            if key is not None:
                self.pop(key)

    def forget_where(self, stale: Callable[[K, V], bool]) -> None:
        """As `forget`, for every entry `stale` says the change touched (one pass)."""
        self.forget(*[key for key, value in self._entries.items() if stale(key, value)])

    def _trim(self) -> None:
        entries, count, max_bytes = self._entries, self._count, self._max_bytes
        over_count = count is not None and len(entries) > count
        over_bytes = max_bytes is not None and self.bytes_held > max_bytes
        if not (over_count or over_bytes):
            return
        free = 1 - self._keep
        count_goal = len(entries) if count is None else count - int(count * free)
        bytes_goal = self.bytes_held if max_bytes is None else max_bytes - int(max_bytes * free)
        while entries and (len(entries) > count_goal or self.bytes_held > bytes_goal):
            key = next(iter(entries))
            value = self.pop(key)
            if self._on_drop is not None and value is not None:
                self._on_drop(key, value)


class Cache:
    """A cache whose entries are one `Bounded`, `_entries`: the bytes they hold, and its
    generation (noted before a read, handed to the cache's `put` or `keep`)."""

    _entries: Bounded[Any, Any]

    @property
    def bytes_held(self) -> int:
        return self._entries.bytes_held

    @property
    def generation(self) -> int:
        return self._entries.generation
