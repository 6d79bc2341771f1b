"""TieredCache: read-through L1 → L2 → L3 with promotion, write-through to L2 then L3, and
invalidation across all three (L1 of every process by a Redis broadcast).

Redis down: L1 and L3 still serve (an L3 entry cannot be checked against the generations
then, which is said in the README), nothing is written, and the outage is counted. S3 down:
L3 is skipped and counted."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter as PromCounter

from headrace import connections
from headrace.cache.entry import CacheEntry
from headrace.cache.memory import MemoryTier
from headrace.cache.redis_tier import RedisTier
from headrace.cache.s3_tier import S3Tier
from headrace.config.settings import Settings
from headrace.connections import REDIS_ERRORS, S3Unavailable
from headrace.schemas.messages import CacheTier

log = logging.getLogger(__name__)

# Background L3 writes waiting at most: past it a write skips L3 (counted), so a slow or
# stalled S3 cannot grow the worker's memory without bound.
L3_QUEUE_MAX = 1000

LOOKUPS = PromCounter(
    "headrace_cache_lookups_total", "Cache reads, by the tier that hit (or miss)", ["tier"]
)
SKIPPED = PromCounter(
    "headrace_cache_tier_unavailable_total", "Reads and writes that skipped a tier", ["tier"]
)


@dataclass(frozen=True)
class Hit:
    entry: CacheEntry
    tier: CacheTier


class TieredCache:
    def __init__(
        self,
        l2: RedisTier,
        l3: S3Tier | None,
        l1_max_bytes: int,
        clock: Callable[[], float] = time.time,
        background_l3: bool = False,
    ) -> None:
        self.l1 = MemoryTier(l1_max_bytes, clock) if l1_max_bytes > 0 else None
        self.l2 = l2
        self.l3 = l3
        self.clock = clock
        self.counts: Counter[str] = Counter()  # this process: hits, misses, skips, writes
        self._lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._stop = threading.Event()
        self._l3_queued = 0  # background L3 writes not yet done (at most L3_QUEUE_MAX)
        self._l3_pool = (
            ThreadPoolExecutor(max_workers=4, thread_name_prefix="cache-l3")
            if background_l3 and l3 is not None
            else None
        )

    # --- reads ------------------------------------------------------------------------------
    def get(self, key: str) -> Hit | None:
        if self.l1 is not None:
            with self._lock:
                entry = self.l1.get(key)
                epoch = self.l1.epoch
            if entry is not None:
                self._looked_up("l1")
                return Hit(entry, "l1")
        else:
            epoch = 0
        entry, redis_up = self._read_l2(key)
        if entry is not None and entry.fresh(self.clock()):
            self._looked_up("l2")
            self._promote(entry, epoch, to_l2=False)
            return Hit(entry, "l2")
        hit = self._get_l3(key, redis_up)
        if hit is None:
            self._looked_up("miss")
            return None
        self._looked_up("l3")
        self._promote(hit, epoch, to_l2=redis_up)
        return Hit(hit, "l3")

    def get_even_stale(self, key: str) -> tuple[Hit, bool] | None:
        """The degradation ladder's read (no L1, nothing promoted): L2's entry, else L3's
        even past its expiry or invalidated since it was written; with whether it is stale
        (an L3 entry that cannot be checked against Redis counts as stale)."""
        now = self.clock()
        entry, _ = self._read_l2(key)
        if entry is not None:
            return Hit(entry, "l2"), not entry.fresh(now)
        entry = self._read_l3(key)
        if entry is None:
            return None
        stale = not entry.fresh(now)
        if not stale:
            try:
                stale = not self.l2.valid(entry)
            except REDIS_ERRORS:
                stale = True
        return Hit(entry, "l3"), stale

    def _read_l2(self, key: str) -> tuple[CacheEntry | None, bool]:
        """L2's entry for ``key`` (None: none, or Redis away), and whether Redis answered."""
        try:
            return self.l2.get(key), True
        except REDIS_ERRORS as exc:
            self._skipped("l2", exc)
            return None, False

    def _read_l3(self, key: str) -> CacheEntry | None:
        """L3's entry for ``key`` as stored (None: none, no L3, or S3 away)."""
        if self.l3 is None:
            return None
        try:
            return self.l3.get(key)
        except S3Unavailable as exc:
            self._skipped("l3", exc)
            return None

    def _get_l3(self, key: str, redis_up: bool) -> CacheEntry | None:
        entry = self._read_l3(key)
        now = self.clock()
        if self.l3 is None or entry is None or not entry.fresh(now):
            return None
        if redis_up:
            try:
                if not self.l2.valid(entry):  # invalidated after it was written
                    self.l3.delete([key])
                    return None
            except REDIS_ERRORS as exc:
                self._skipped("l2", exc)
            except S3Unavailable as exc:
                self._skipped("l3", exc)
                return None
        touched = entry.touched(now)
        if touched is not entry:  # sliding: the object's expiry moves with its hits
            self._put_l3(touched)
        return touched

    def _promote(self, entry: CacheEntry, epoch: int, to_l2: bool) -> None:
        if to_l2:
            try:
                self.l2.put(entry, self.clock())
            except REDIS_ERRORS as exc:
                self._skipped("l2", exc)
        if self.l1 is not None:
            with self._lock:
                self.l1.put(entry, len(entry.to_bytes()), if_epoch=epoch)

    # --- writes -----------------------------------------------------------------------------
    def generations(self, scopes: list[str]) -> dict[str, int] | None:
        """The scopes' current generations, or None while Redis is unreachable (a request
        submitted then is not written through: its result could not be checked)."""
        try:
            return self.l2.generations(scopes)
        except REDIS_ERRORS as exc:
            self._skipped("l2", exc)
            return None

    def put(self, entry: CacheEntry) -> bool:
        """Write through L2 then L3, unless a scope of ``entry`` was invalidated since its
        generations were read. Returns whether it was written."""
        return self.put_many([entry]) == 1

    def put_many(self, entries: list[CacheEntry]) -> int:
        """``put`` for several entries: L2 in one round trip, then L3 (in the background
        when ``background_l3``). Returns how many were written."""
        if not entries:
            return 0
        try:
            written = self.l2.put_many(entries, self.clock())
        except REDIS_ERRORS as exc:
            self._skipped("l2", exc)
            return 0
        accepted = [e for e, ok in zip(entries, written, strict=True) if ok]
        self.counts["stale_write_refused"] += len(entries) - len(accepted)
        self.counts["write"] += len(accepted)
        for entry in accepted:
            if self._l3_pool is None:
                self._put_l3(entry)
                continue
            with self._lock:
                queued = self._l3_queued < L3_QUEUE_MAX
                self._l3_queued += queued
            if queued:
                self._l3_pool.submit(self._put_l3, entry, True)
            else:  # S3 slower than the writes: L3 misses this one (L2 has it)
                self.counts["l3_write_dropped"] += 1
        return len(accepted)

    def _put_l3(self, entry: CacheEntry, queued: bool = False) -> None:
        try:
            if self.l3 is not None:
                self.l3.put(entry)
        except S3Unavailable as exc:
            self._skipped("l3", exc)
        finally:
            if queued:
                with self._lock:
                    self._l3_queued -= 1

    # --- invalidation -----------------------------------------------------------------------
    def invalidate(self, scopes: Iterable[str] = (), keys: Iterable[str] = ()) -> int:
        """Evict everything ``scopes`` cover and the entries ``keys`` from every tier, and
        tell every process to drop them from its L1. Idempotent. Returns the number of L2
        entries deleted. Raises if Redis is unreachable: the generations are the truth."""
        scopes, keys = list(scopes), list(keys)
        gone = self.l2.invalidate(scopes, keys)
        if self.l3 is not None and gone:
            try:
                self.l3.delete(gone)
            except S3Unavailable as exc:  # the generations keep them from being served
                self._skipped("l3", exc)
        self.l2.publish_eviction(scopes, keys)
        self._evict_local(scopes, keys)
        self.counts["invalidations"] += 1
        return len(gone)

    def _evict_local(self, scopes: list[str], keys: list[str]) -> None:
        if self.l1 is not None:
            with self._lock:
                self.l1.invalidate(scopes, keys)

    def listen(self) -> TieredCache:
        """Apply other processes' invalidations to this L1 (a daemon thread). Whenever the
        subscription is (re)established, L1 is cleared: broadcasts may have been missed."""
        if self.l1 is None or self._listener is not None:
            return self
        ready = threading.Event()
        self._listener = threading.Thread(
            target=self._listen, args=(ready,), name="cache-evictions", daemon=True
        )
        self._listener.start()
        ready.wait(5)
        return self

    def _listen(self, ready: threading.Event) -> None:
        while not self._stop.is_set():
            pubsub: Any = None
            try:
                # redis-py types pubsub() in some releases and not in others: Any fits both
                client: Any = self.l2.redis
                pubsub = client.pubsub(ignore_subscribe_messages=False)
                pubsub.subscribe(self.l2.channel)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.2)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        with self._lock:
                            if self.l1 is not None:
                                self.l1.clear()
                        ready.set()
                    elif message["type"] == "message":
                        doc = json.loads(message["data"])
                        self._evict_local(list(doc["scopes"]), list(doc["keys"]))
                        self.counts["evictions_heard"] += 1
            except REDIS_ERRORS as exc:
                self._skipped("l2", exc)
                time.sleep(0.5)
            finally:
                if pubsub is not None:
                    with contextlib.suppress(*REDIS_ERRORS):
                        pubsub.close()

    def close(self) -> None:
        self._stop.set()
        if self._l3_pool is not None:
            self._l3_pool.shutdown(wait=True)
        if self._listener is not None:
            self._listener.join(timeout=2)

    def _looked_up(self, outcome: str) -> None:
        self.counts["miss" if outcome == "miss" else f"{outcome}_hit"] += 1
        LOOKUPS.labels(outcome).inc()

    def _skipped(self, tier: str, exc: BaseException) -> None:
        SKIPPED.labels(tier).inc()
        self.counts[f"{tier}_unavailable"] += 1
        if self.counts[f"{tier}_unavailable"] in (1, 100, 10_000):
            log.warning("cache %s unavailable (%s); going on without it", tier, exc)


def open_cache(settings: Settings, *, l1: bool = True, background_l3: bool = False) -> TieredCache:
    """The cache ``settings`` describe; ``l1=False`` for processes that only write (workers)
    or only invalidate; ``background_l3``: L3 writes do not hold up the writer (workers)."""
    timeout = settings.cache_timeout_s
    l2 = RedisTier(connections.redis_client(settings, timeout_s=timeout), settings.topic_prefix)
    l3 = None
    if settings.cache_s3_bucket:
        client = connections.s3_client(settings, read_timeout_s=max(timeout, 2.0))
        l3 = S3Tier(client, settings.cache_s3_bucket, settings.topic_prefix)
    return TieredCache(
        l2, l3, settings.cache_l1_max_bytes if l1 else 0, background_l3=background_l3
    )
