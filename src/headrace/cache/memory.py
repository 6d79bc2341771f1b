"""L1: an in-process LRU bounded in bytes, with a scope index so one invalidation evicts every
entry it covers. Not thread-safe by itself; TieredCache holds a lock around it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from headrace.cache.entry import CacheEntry

ENTRY_OVERHEAD_BYTES = 200  # dict slots, the OrderedDict link, the index entries


@dataclass
class MemoryStats:
    hits: int = 0
    misses: int = 0
    expired: int = 0
    evicted_lru: int = 0
    invalidated: int = 0


class MemoryTier:
    def __init__(self, max_bytes: int, clock: Callable[[], float]) -> None:
        self.max_bytes = max_bytes
        self.clock = clock
        self.bytes = 0
        self.stats = MemoryStats()
        # bumped by every invalidation: a promotion that read a lower tier before one landed
        # must not insert what it read (it may be what was just invalidated)
        self.epoch = 0
        self._entries: OrderedDict[str, tuple[CacheEntry, int]] = OrderedDict()
        self._by_scope: dict[str, set[str]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> CacheEntry | None:
        found = self._entries.get(key)
        if found is None:
            self.stats.misses += 1
            return None
        entry, size = found
        now = self.clock()
        if not entry.fresh(now):
            self.stats.expired += 1
            self.stats.misses += 1
            self._remove(key)
            return None
        touched = entry.touched(now)
        self._entries[key] = (touched, size)
        self._entries.move_to_end(key)
        self.stats.hits += 1
        return touched

    def put(self, entry: CacheEntry, size: int, if_epoch: int | None = None) -> bool:
        """Insert ``entry`` (``size``: its byte form's length). With ``if_epoch``, only if no
        invalidation landed since that epoch was read."""
        if if_epoch is not None and if_epoch != self.epoch:
            return False
        cost = size + ENTRY_OVERHEAD_BYTES
        if cost > self.max_bytes:
            return False
        self._remove(entry.key)
        self._entries[entry.key] = (entry, cost)
        for scope in entry.scopes:
            self._by_scope.setdefault(scope, set()).add(entry.key)
        self.bytes += cost
        while self.bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._remove(oldest)
            self.stats.evicted_lru += 1
        return True

    def invalidate(self, scopes: Iterable[str] = (), keys: Iterable[str] = ()) -> int:
        self.epoch += 1
        doomed = set(keys)
        for scope in scopes:
            doomed |= self._by_scope.get(scope, set())
        gone = 0
        for key in doomed:
            if self._remove(key):
                gone += 1
        self.stats.invalidated += gone
        return gone

    def clear(self) -> None:
        self.epoch += 1
        self._entries.clear()
        self._by_scope.clear()
        self.bytes = 0

    def _remove(self, key: str) -> bool:
        found = self._entries.pop(key, None)
        if found is None:
            return False
        entry, cost = found
        self.bytes -= cost
        for scope in entry.scopes:
            keys = self._by_scope.get(scope)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_scope[scope]
        return True
