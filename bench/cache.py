"""Cache benchmark, every figure from one run on the local stack:

(a) hit latency per tier, p50 / p99: L1 (this process), L2 (Redis), L3 (SeaweedFS, zstd;
    includes the generation check in Redis and the promotion to L2 and L1)
(b) invalidation propagation: an event produced on an upstream topic -> gone from L2, L3 and
    this process's L1 (the invalidation consumer runs as its own process, `headrace
    invalidator`; L1 is evicted last, so L1 gone means every tier is)

    python -m bench.cache [--l1 20000] [--l2 2000] [--l3 200] [--events 100]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
import uuid

import typer
from rich.console import Console
from rich.table import Table

from headrace.cache.entry import CacheEntry
from headrace.cache.keys import cache_key, entry_scopes
from headrace.cache.store import TieredCache, open_cache
from headrace.config.cache_policy import ExpiryPolicy
from headrace.config.settings import Settings
from headrace.config.tag_rules import TagRule
from headrace.health.ready import is_ready_line
from headrace.ops.localstack import LocalStack
from headrace.schemas.messages import EmbeddingResult
from headrace.schemas.params import EmbedParams
from headrace.transport.kafka import clients as kafka_clients

console = Console()
TARGETS_MS = {"l1": 0.1, "l2": 2.0, "propagation_p99": 250.0}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def an_entry(cache: TieredCache, text: str, tag: str) -> CacheEntry:
    scopes = cache.generations(entry_scopes("bench", "m", "v1", [tag]))
    assert scopes is not None, "Redis is not reachable"
    return CacheEntry.new(
        key=cache_key("bench", "m", "v1", "embed", text, EmbedParams()),
        tenant="bench",
        model="m",
        result=EmbeddingResult(
            embedding=[0.01 * i for i in range(384)], token_count=9, truncated=False
        ),
        scopes=scopes,
        policy=ExpiryPolicy(mode="tags"),
        now=time.time(),
    )


def timed_ms(fn: object, count: int, before: object = None) -> list[float]:
    out = []
    for _ in range(count):
        if callable(before):
            before()
        start = time.perf_counter()
        assert callable(fn)
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


def main(l1: int = 20_000, l2: int = 2_000, l3: int = 200, events: int = 100) -> None:
    prefix = f"bench-cache-{uuid.uuid4().hex[:6]}"
    upstream = f"{prefix}.catalog.changes"
    rule = TagRule(topic=upstream, tag="product:{pid}", tenant="bench", fields={"pid": "id"})
    settings = Settings(topic_prefix=prefix, cache_tag_rules=[rule])
    stack = LocalStack(settings)
    started = not stack.is_up()
    if started:
        stack.up()
    env = {
        **os.environ,
        "HEADRACE_TOPIC_PREFIX": prefix,
        "HEADRACE_CACHE_TAG_RULES": json.dumps([rule.model_dump()]),
    }
    invalidator = subprocess.Popen(
        [sys.executable, "-m", "headrace.ops.cli", "invalidator", "--log-level", "WARNING"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    cache = open_cache(settings)
    try:
        assert invalidator.stdout is not None
        assert is_ready_line(invalidator.stdout.readline()), "invalidator did not start"
        cache.listen()
        entry = an_entry(cache, "a sentence for the benchmark", "product:0")
        assert cache.put(entry)
        cache.get(entry.key)  # into L1
        lat = {"l1": timed_ms(lambda: cache.get(entry.key), l1)}
        no_l1 = open_cache(settings, l1=False)
        lat["l2"] = timed_ms(lambda: no_l1.get(entry.key), l2)
        entry_key = no_l1.l2._entry + entry.key
        lat["l3"] = timed_ms(
            lambda: no_l1.get(entry.key), l3, before=lambda: no_l1.l2.redis.delete(entry_key)
        )
        tiers = {t: no_l1.counts[f"{t}_hit"] for t in ("l2", "l3")}
        assert tiers == {"l2": l2, "l3": l3}, tiers

        producer = kafka_clients.producer(settings)
        propagation = []
        for i in range(1, events + 1):
            doomed = an_entry(cache, f"event {i}", f"product:{i}")
            assert cache.put(doomed)
            assert cache.get(doomed.key) is not None and cache.get(doomed.key).tier == "l1"  # type: ignore[union-attr]
            start = time.perf_counter()
            producer.send(upstream, json.dumps({"id": i}).encode())
            producer.flush()
            while True:
                assert cache.l1 is not None
                with cache._lock:
                    if cache.l1.get(doomed.key) is None:
                        break
                time.sleep(0.0005)
            propagation.append((time.perf_counter() - start) * 1000)
            assert no_l1.l2.get(doomed.key) is None
        producer.close()
    finally:
        cache.close()
        invalidator.terminate()
        invalidator.wait(10)
        if started:
            stack.down()

    table = Table("figure", "p50 ms", "p99 ms", "n", "target")
    for tier in ("l1", "l2", "l3"):
        values = lat[tier]
        target = f"p50 <= {TARGETS_MS[tier]} ms" if tier in TARGETS_MS else ""
        table.add_row(
            f"{tier} hit",
            f"{pct(values, 0.5):.4f}",
            f"{pct(values, 0.99):.4f}",
            str(len(values)),
            target,
        )
    table.add_row(
        "invalidation propagation",
        f"{pct(propagation, 0.5):.1f}",
        f"{pct(propagation, 0.99):.1f}",
        str(len(propagation)),
        f"p99 <= {TARGETS_MS['propagation_p99']:.0f} ms",
    )
    console.print(table)
    console.print(
        f"L2 / L1 p50: {statistics.median(lat['l2']) / statistics.median(lat['l1']):.0f}x; "
        f"L3 / L2 p50: {statistics.median(lat['l3']) / statistics.median(lat['l2']):.1f}x"
    )


if __name__ == "__main__":
    typer.run(main)
