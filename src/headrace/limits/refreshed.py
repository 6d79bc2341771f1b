"""Reads kept for a moment and refreshed behind their readers (stale-while-revalidate).

A value younger than ``fresh_s`` is served as it is. One older, but younger than ``stale_s``,
is served too, and a reload starts beside the reader (``refresh_in``; one at a time per key):
the next reader gets the reloaded value. Only a value missing, or older than ``stale_s`` (its
key went unread that long), is loaded while the reader waits. A reader that checks often so
never waits for the store, and what it sees is at most ``fresh_s`` plus one reload old.

A reload that fails leaves the value as it was (and is tried again by the next reader past
``fresh_s``); a load the reader waits for raises to it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from cachetools import LRUCache

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Refresh = Callable[[Callable[[], None]], object]  # runs a reload beside the reader


@dataclass(frozen=True)
class _Held(Generic[V]):
    value: V
    at: float  # when its load began


class Refreshed(Generic[K, V]):
    def __init__(
        self,
        fresh_s: float,
        stale_s: float,
        refresh_in: Refresh,
        clock: Callable[[], float],
        maxsize: int = 10_000,
    ) -> None:
        if not 0 <= fresh_s <= stale_s:
            raise ValueError(f"fresh_s {fresh_s} must be within 0 and stale_s {stale_s}")
        self.fresh_s = fresh_s
        self.stale_s = stale_s
        self.clock = clock
        self._refresh_in = refresh_in
        self._held: LRUCache[K, _Held[V]] = LRUCache(maxsize)
        self._reloading: set[K] = set()
        self._lock = threading.Lock()

    def get(self, key: K, load: Callable[[], V]) -> V:
        now = self.clock()
        with self._lock:
            held = self._held.get(key)
            due = held is not None and now - held.at >= self.fresh_s
            if due and key not in self._reloading:
                self._reloading.add(key)
            else:
                due = False
        if held is None or now - held.at >= self.stale_s:
            return self._load(key, load)
        if due:
            self._refresh_in(lambda: self._reload(key, load))
            with self._lock:  # a reload that ran already (inline) is the newer value
                held = self._held.get(key, held)
        return held.value

    def _load(self, key: K, load: Callable[[], V]) -> V:
        began = self.clock()
        value = load()
        with self._lock:
            self._held[key] = _Held(value, began)
        return value

    def _reload(self, key: K, load: Callable[[], V]) -> None:
        try:
            self._load(key, load)
        except Exception as exc:  # kept as it was; the next reader past fresh_s tries again
            log.debug("reload of %r failed: %r", key, exc)
        finally:
            with self._lock:
                self._reloading.discard(key)
