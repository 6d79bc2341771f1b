"""L1 and the expiry modes, on an injected clock."""

from __future__ import annotations

import pytest

from headrace.cache.entry import CacheEntry
from headrace.cache.memory import ENTRY_OVERHEAD_BYTES, MemoryTier
from headrace.config.cache_policy import ExpiryPolicy
from headrace.schemas.messages import EmbeddingResult
from tests.clock import FakeClock


def entry(
    key: str, policy: ExpiryPolicy, now: float, scopes: dict[str, int] | None = None
) -> CacheEntry:
    return CacheEntry.new(
        key=key,
        tenant="acme",
        model="m",
        result=EmbeddingResult(embedding=[0.5] * 4, token_count=3, truncated=False),
        scopes=scopes if scopes is not None else {"tenant/acme": 0},
        policy=policy,
        now=now,
    )


TTL = ExpiryPolicy(mode="ttl", ttl_s=10)
SLIDING = ExpiryPolicy(mode="sliding", ttl_s=10)
TAGS = ExpiryPolicy(mode="tags")


def test_absolute_ttl_expires_however_often_it_is_read() -> None:
    clock = FakeClock()
    l1 = MemoryTier(1 << 20, clock)
    l1.put(entry("k", TTL, clock.now), 100)
    for _ in range(3):
        clock.now += 3
        assert l1.get("k") is not None
    clock.now += 1.5  # 10.5 s after it was written
    assert l1.get("k") is None
    assert l1.stats.expired == 1 and len(l1) == 0


def test_sliding_ttl_lives_while_it_is_read() -> None:
    clock = FakeClock()
    l1 = MemoryTier(1 << 20, clock)
    l1.put(entry("k", SLIDING, clock.now), 100)
    for _ in range(5):
        clock.now += 9  # 45 s in all, never 10 s without a hit
        assert l1.get("k") is not None
    clock.now += 10.1
    assert l1.get("k") is None


def test_tag_entries_stay_until_their_scope_is_invalidated() -> None:
    clock = FakeClock()
    l1 = MemoryTier(1 << 20, clock)
    l1.put(entry("a", TAGS, clock.now, {"tenant/acme/tag/doc:1": 0}), 100)
    l1.put(entry("b", TAGS, clock.now, {"tenant/acme/tag/doc:2": 0}), 100)
    clock.now += 365 * 24 * 3600
    assert l1.get("a") is not None
    assert l1.invalidate(scopes=["tenant/acme/tag/doc:1"]) == 1
    assert l1.get("a") is None and l1.get("b") is not None
    assert l1.invalidate(scopes=["tenant/acme/tag/doc:1"]) == 0  # idempotent
    assert l1.invalidate(keys=["b"]) == 1 and len(l1) == 0


def test_expiry_policy_needs_a_ttl_except_for_tags() -> None:
    with pytest.raises(ValueError):
        ExpiryPolicy(mode="ttl")
    assert ExpiryPolicy(mode="tags").ttl_s is None


def test_lru_is_bounded_in_bytes_and_evicts_the_least_recently_used() -> None:
    clock = FakeClock()
    cost = 1000 + ENTRY_OVERHEAD_BYTES
    l1 = MemoryTier(3 * cost, clock)
    for k in "abc":
        assert l1.put(entry(k, TTL, clock.now), 1000)
    assert l1.get("a") is not None  # a is now the most recent
    l1.put(entry("d", TTL, clock.now), 1000)
    assert l1.get("b") is None and l1.get("a") is not None and l1.get("d") is not None
    assert l1.bytes <= l1.max_bytes and l1.stats.evicted_lru == 1
    assert not l1.put(entry("huge", TTL, clock.now), 4 * cost)  # never fits: not stored


def test_a_promotion_that_raced_an_invalidation_is_not_inserted() -> None:
    clock = FakeClock()
    l1 = MemoryTier(1 << 20, clock)
    epoch = l1.epoch  # read before looking in L2 ...
    l1.invalidate(scopes=["tenant/acme"])  # ... an invalidation lands meanwhile
    assert not l1.put(entry("k", TTL, clock.now), 100, if_epoch=epoch)
    assert l1.put(entry("k", TTL, clock.now), 100, if_epoch=l1.epoch)
