"""The invalidation consumer on a real broker, Redis and SeaweedFS: an upstream event evicts
an entry from L2, L3 and the L1 of two other processes within a second; explicit records on
<prefix>.invalidate work; unreadable records are skipped and counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from headrace.cache.entry import CacheEntry
from headrace.cache.store import TieredCache, open_cache
from headrace.config.settings import Settings
from headrace.config.tag_rules import TagRule
from headrace.consumers.invalidation import Invalidator
from headrace.ops.localstack import LocalStack
from headrace.schemas.cache import Invalidation
from headrace.schemas.signing import invalidation_signature
from headrace.schemas.topics import Topics
from headrace.transport.kafka import clients as kafka_clients
from tests.cache.entries import TAGS, new_entry
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def conf(stack: LocalStack) -> Settings:
    prefix = f"t-inval-{uuid.uuid4().hex[:8]}"
    rule = TagRule(
        topic=f"{prefix}.catalog.changes",
        tag="product:{pid}",
        tenant="{shop}",
        fields={"pid": "product.id", "shop": "/shop"},
    )
    return Settings(topic_prefix=prefix, cache_tag_rules=[rule])


@pytest.fixture
def invalidator(conf: Settings) -> Iterator[Invalidator]:
    inv = Invalidator(conf)
    stop = threading.Event()
    thread = threading.Thread(target=inv.run, args=(stop,), daemon=True)
    thread.start()
    yield inv
    stop.set()
    thread.join(timeout=10)


def tagged_entry(cache: TieredCache, tenant: str, text: str, tag: str) -> CacheEntry:
    entry = new_entry(cache, tenant, text, [tag], policy=TAGS, embedding=[1.0, 0.0])
    assert cache.put(entry)
    return entry


def probe(conf: Settings, key: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HEADRACE_TOPIC_PREFIX": conf.topic_prefix}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.cache.l1_probe", key],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    assert line[:1] == ["READY"], line
    return proc


def produce(conf: Settings, topic: str, value: bytes) -> None:
    producer = kafka_clients.producer(conf)
    producer.send(topic, value).get(timeout=30)
    producer.close()


def test_an_upstream_event_evicts_every_tier_and_two_processes_l1(
    conf: Settings, invalidator: Invalidator
) -> None:
    cache = open_cache(conf, l1=False)
    doomed = tagged_entry(cache, "acme", "a red bicycle", "product:123")
    kept = tagged_entry(cache, "acme", "a blue bicycle", "product:124")
    other_tenant = tagged_entry(cache, "globex", "a red bicycle", "product:123")
    probes = [probe(conf, doomed.key) for _ in range(2)]
    try:
        sent_at = time.monotonic()
        event = {"shop": "acme", "product": {"id": 123, "name": "bicycle"}}
        produce(conf, f"{conf.topic_prefix}.catalog.changes", json.dumps(event).encode())
        gone_at = []
        for p in probes:
            assert p.stdout is not None
            line = p.stdout.readline().split()
            assert line[:1] == ["GONE"], line
            gone_at.append(float(line[1]))
        assert max(gone_at) - sent_at < 1.0, gone_at
    finally:
        for p in probes:
            p.kill()
    assert cache.get(doomed.key) is None
    assert cache.l3 is not None and cache.l3.get(doomed.key) is None
    assert cache.get(kept.key) is not None  # another tag
    assert cache.get(other_tenant.key) is not None  # the same tag of another tenant


def test_explicit_invalidations_and_unreadable_records(
    conf: Settings, invalidator: Invalidator
) -> None:
    cache = open_cache(conf, l1=False)
    by_tag = tagged_entry(cache, "acme", "one", "doc:1")
    by_key = tagged_entry(cache, "acme", "two", "doc:2")
    by_tenant = tagged_entry(cache, "initech", "three", "doc:3")
    topic = Topics(conf.topic_prefix).invalidate
    upstream = f"{conf.topic_prefix}.catalog.changes"
    produce(conf, topic, b"{not json")
    produce(conf, topic, b'{"tags": ["doc:1"]}')  # a tag needs a tenant
    produce(conf, upstream, b'{"shop": "acme"}')  # the rule's product.id is missing
    for record in (
        Invalidation(tenant="acme", tags=["doc:1"]),
        Invalidation(tenant="acme", tags=["doc:1"]),  # twice: idempotent
        Invalidation(tenant="acme", keys=[by_key.key]),
        Invalidation(tenant="initech", all_of_tenant=True),
    ):
        produce(conf, topic, record.model_dump_json().encode())
    eventually(lambda: invalidator.counts["applied"] >= 4, 10, "4 invalidations applied")
    assert invalidator.counts["applied"] == 4
    assert invalidator.counts["invalid_record"] == 2
    assert invalidator.counts["rule_mismatch"] == 1
    for entry in (by_tag, by_key, by_tenant):
        assert cache.get(entry.key) is None
    assert cache.l2.stats()["invalidations_applied"] == 4


def test_a_signing_tenant_s_unsigned_invalidation_is_skipped(
    stack: LocalStack, tmp_path: Path
) -> None:
    (tmp_path / "acme").write_bytes(b"acme-key")
    conf = Settings(topic_prefix=f"t-inval-{uuid.uuid4().hex[:8]}", tenant_keys_dir=tmp_path)
    inv = Invalidator(conf)
    stop = threading.Event()
    thread = threading.Thread(target=inv.run, args=(stop,), daemon=True)
    thread.start()
    try:
        cache = open_cache(conf, l1=False)
        kept = tagged_entry(cache, "acme", "one", "doc:1")
        gone = tagged_entry(cache, "acme", "two", "doc:2")
        topic = Topics(conf.topic_prefix).invalidate
        forged = Invalidation(tenant="acme", tags=["doc:1"])  # not signed by acme
        real = Invalidation(tenant="acme", tags=["doc:2"])
        real = real.model_copy(
            update={"signature": invalidation_signature(b"acme-key", real.signable())}
        )
        for record in (forged, real):
            produce(conf, topic, record.model_dump_json().encode())
        eventually(lambda: inv.counts["applied"] >= 1, 10, "the signed invalidation applied")
        assert inv.counts["applied"] == 1 and inv.counts["unauthenticated"] == 1
        assert cache.get(kept.key) is not None and cache.get(gone.key) is None
    finally:
        stop.set()
        thread.join(timeout=10)
