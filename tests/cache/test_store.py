"""The tiers together on a real Redis and SeaweedFS: hits and misses per tier, promotion,
the stale-write race, tenant isolation, and each store being away."""

from __future__ import annotations

import socket
import uuid

import pytest
from prometheus_client import REGISTRY

from headrace.cache import store
from headrace.cache.keys import cache_key, entry_scopes
from headrace.cache.store import open_cache
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.schemas.params import EmbedParams
from tests.cache.entries import new_entry


def free_port() -> int:
    """A port nothing listens on (a store that is down)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def settings(**overrides: object) -> Settings:
    return Settings(topic_prefix=f"t-cache-{uuid.uuid4().hex[:8]}", **overrides)  # type: ignore[arg-type]


def looked_up(tier: str) -> float:
    """headrace_cache_lookups_total{tier} in this process's registry."""
    return REGISTRY.get_sample_value("headrace_cache_lookups_total", {"tier": tier}) or 0.0


def test_miss_then_l2_then_l1_and_l3_promotes_to_both(stack: LocalStack) -> None:
    before = {t: looked_up(t) for t in ("l1", "l2", "l3", "miss")}
    conf = settings()
    writer, reader = open_cache(conf, l1=False), open_cache(conf)
    entry = new_entry(writer, "acme", "a red bicycle")
    assert reader.get(entry.key) is None
    assert writer.put(entry)
    first = reader.get(entry.key)
    assert first is not None and first.tier == "l2" and first.entry.result == entry.result
    again = reader.get(entry.key)
    assert again is not None and again.tier == "l1"
    # gone from L2 (evicted by Redis, say): L3 serves and promotes to L2 and L1
    reader.l2.redis.delete(reader.l2._entry + entry.key)
    other = open_cache(conf)
    from_l3 = other.get(entry.key)
    assert from_l3 is not None and from_l3.tier == "l3"
    assert other.l2.get(entry.key) is not None
    assert other.get(entry.key).tier == "l1"  # type: ignore[union-attr]
    assert reader.counts["l2_hit"] == 1 and reader.counts["l1_hit"] == 1
    assert reader.counts["miss"] == 1
    # the same lookups as Prometheus series, per tier
    assert {t: looked_up(t) - n for t, n in before.items()} == {
        "l1": 2,
        "l2": 1,
        "l3": 1,
        "miss": 1,
    }


def test_a_result_for_a_request_older_than_an_invalidation_is_not_written(
    stack: LocalStack,
) -> None:
    conf = settings()
    cache = open_cache(conf)
    # the request is submitted: its scopes' generations are read ...
    entry = new_entry(cache, "acme", "stale?", tags=["doc:1"])
    # ... an invalidation of one of its tags lands while it is computed ...
    cache.invalidate(scopes=entry_scopes("acme", "m", "v1", ["doc:1"])[2:])
    # ... and its result arrives: not written, in no tier
    assert not cache.put(entry)
    assert cache.counts["stale_write_refused"] == 1
    assert cache.get(entry.key) is None
    assert cache.l3 is not None and cache.l3.get(entry.key) is None
    fresh = new_entry(cache, "acme", "stale?", tags=["doc:1"])  # submitted after it
    assert cache.put(fresh)
    assert cache.get(fresh.key) is not None


def test_an_entry_written_before_an_invalidation_is_never_served(stack: LocalStack) -> None:
    conf = settings()
    cache = open_cache(conf)
    entry = new_entry(cache, "acme", "doc text", tags=["doc:9"])
    assert cache.put(entry)
    assert cache.invalidate(scopes=["tenant/acme/tag/doc:9"]) == 1
    assert cache.get(entry.key) is None
    assert cache.l3 is not None and cache.l3.get(entry.key) is None
    # the whole tenant: no index, the generation alone keeps it out of every tier
    other = new_entry(cache, "acme", "another")
    assert cache.put(other)
    cache.invalidate(scopes=["tenant/acme"])
    assert cache.l3.get(other.key) is not None  # the object is still there ...
    assert cache.get(other.key) is None  # ... but refused in every tier (and deleted)
    assert cache.l3.get(other.key) is None


def test_tenants_never_share_an_entry(stack: LocalStack) -> None:
    conf = settings()
    cache = open_cache(conf)
    acme = new_entry(cache, "acme", "same text")
    assert cache.put(acme)
    globex_key = cache_key("globex", "m", "v1", "embed", "same text", EmbedParams())
    assert globex_key != acme.key and cache.get(globex_key) is None
    cache.invalidate(scopes=["tenant/globex"])  # another tenant's invalidation: no effect
    assert cache.get(acme.key) is not None


def test_redis_down_l1_and_l3_still_serve_and_nothing_is_written(stack: LocalStack) -> None:
    conf = settings()
    up = open_cache(conf)
    entry = new_entry(up, "acme", "served without redis")
    assert up.put(entry)
    down = open_cache(conf.model_copy(update={"redis_url": f"redis://127.0.0.1:{free_port()}/0"}))
    hit = down.get(entry.key)
    assert hit is not None and hit.tier == "l3"
    again = down.get(entry.key)
    assert again is not None and again.tier == "l1"
    assert down.generations(["tenant/acme"]) is None
    assert not down.put(new_entry(up, "acme", "not written"))
    assert down.counts["l2_unavailable"] >= 3


def test_s3_down_l3_is_skipped_and_counted(stack: LocalStack) -> None:
    conf = settings()
    down = open_cache(
        conf.model_copy(update={"s3_endpoint_url": f"http://127.0.0.1:{free_port()}"})
    )
    entry = new_entry(down, "acme", "no s3")
    assert down.put(entry)  # L2 takes it; L3 is skipped
    assert down.counts["l3_unavailable"] == 1
    assert down.get("0" * 64) is None  # a miss goes down to L3, which is skipped
    assert down.counts["l3_unavailable"] == 2
    hit = down.get(entry.key)
    assert hit is not None and hit.tier == "l2"


def test_sliding_entries_in_redis_live_while_read(stack: LocalStack) -> None:
    conf = settings()
    cache = open_cache(conf, l1=False)
    entry = new_entry(cache, "acme", "sliding")
    entry = entry.model_copy(
        update={"mode": "sliding", "ttl_s": 1.0, "expires_at": cache.clock() + 1}
    )
    assert cache.put(entry)
    ttl_before = cache.l2.redis.pttl(cache.l2._entry + entry.key)
    assert 0 < ttl_before <= 1000
    cache.l2.redis.pexpire(cache.l2._entry + entry.key, 200)  # as if 0.8 s had passed
    assert cache.l2.get(entry.key) is not None  # a hit ...
    assert cache.l2.redis.pttl(cache.l2._entry + entry.key) > 800  # ... renews the full second


def test_background_l3_writes_past_their_bound_skip_l3_and_are_counted(
    stack: LocalStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = settings()
    monkeypatch.setattr(store, "L3_QUEUE_MAX", 2)
    writer = open_cache(conf, l1=False, background_l3=True)
    entries = [new_entry(writer, "acme", f"text number {i}") for i in range(40)]
    assert writer.put_many(entries) == 40  # L2 has every one
    assert writer.counts["l3_write_dropped"] > 0
    writer.close()
    kept = [e for e in entries if writer.l3 is not None and writer.l3.get(e.key) is not None]
    assert len(kept) == 40 - writer.counts["l3_write_dropped"]
