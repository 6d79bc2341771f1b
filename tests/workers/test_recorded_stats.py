"""What workers and dispatchers keep in Redis about traffic and versions (real Redis):
request lengths per bucket for warm-up, each version's outcomes and latency per second for
the canary judge, and shadow comparisons."""

from __future__ import annotations

import uuid

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.schemas.messages import EmbeddingResult, Reply
from headrace.workers.comparisons import Comparisons, Side, cosine
from headrace.workers.lengths import HOUR_S, LengthHistogram
from headrace.workers.version_stats import EDGES_MS, VersionStats


@pytest.fixture
def prefix() -> str:
    return f"t-stats-{uuid.uuid4().hex[:8]}"


def test_lengths_add_up_over_dispatchers_and_hours(stack: LocalStack, prefix: str) -> None:
    client = connections.redis_client(Settings())
    a, b = LengthHistogram(client, prefix), LengthHistogram(client, prefix)
    now = 1_800_000_000.0
    a.add(16, [10, 10, 12])
    a.save(now)
    b.add(16, [10])
    b.add(32, [20])
    b.save(now + HOUR_S)  # the next hour
    a.save(now)  # nothing new: nothing written twice
    assert a.recent([16, 32, 64], hours=2, now=now + HOUR_S) == {
        16: {10: 3, 12: 1},
        32: {20: 1},
        64: {},
    }
    assert a.recent([16], hours=1, now=now + HOUR_S) == {16: {10: 1}}


def test_a_versions_window_counts_errors_and_latency(stack: LocalStack, prefix: str) -> None:
    stats = VersionStats(connections.redis_client(Settings()), prefix, "enc")
    now = 1_800_000_000.0
    stats.add("v1", now - 5, [(True, 10.0)] * 98 + [(False, 400.0), (True, 900.0)])
    stats.add("v1", now - 60, [(False, 1.0)] * 50)  # outside a 30 s window
    stats.add("v2", now, [(True, 20.0)])
    w = stats.window("v1", now, 30)
    assert (w.requests, w.errors) == (100, 1)
    assert w.p50_ms is not None and 10.0 <= w.p50_ms < 10.0 * 1.25
    assert w.p99_ms is not None and 400.0 <= w.p99_ms < 400.0 * 1.25
    assert stats.window("v2", now, 30).requests == 1
    assert stats.window("v3", now, 30).p99_ms is None
    assert EDGES_MS[0] == 1.0


def embedding(values: list[float]) -> Reply:
    return Reply(
        request_id="r",
        tenant="t",
        model="enc",
        result=EmbeddingResult(embedding=values, token_count=3),
    )


def test_a_shadow_comparison_is_made_once_both_sides_wrote(stack: LocalStack, prefix: str) -> None:
    comparisons = Comparisons(connections.redis_client(Settings()), prefix, "enc")
    served, shadow = [1.0, 0.0, 0.0], [0.8, 0.6, 0.0]
    assert not comparisons.record("acme", "r1", "shadow", Side.of("v2", embedding(shadow)), "v1")
    assert comparisons.record("acme", "r1", "served", Side.of("v1", embedding(served)), "v2")
    # the other order, and a shadow that failed
    assert not comparisons.record("acme", "r2", "served", Side.of("v1", embedding(served)), "v2")
    failed = Reply.failure("r2", "acme", "enc", "model_error", "boom")  # type: ignore[arg-type]
    assert comparisons.record("acme", "r2", "shadow", Side.of("v2", failed), "v1")
    found = comparisons.summary("v1", "v2")
    assert found["compared"] == 2 and found["shadow_errors"] == 1
    assert found["mean_cosine"] == pytest.approx(cosine(served, shadow)) == pytest.approx(0.8)
