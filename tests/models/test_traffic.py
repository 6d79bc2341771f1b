"""Assigning requests to versions (pure): splits land near their weights and stick to their
subject, a canary takes its share, a version without a live worker gives way to the stable
one, shadows sample their share."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
from pydantic import ValidationError

from headrace.models.traffic import (
    Canary,
    CanaryRules,
    Shadow,
    TrafficPolicy,
    assign,
    shadowed,
    unit_hash,
)


def test_unit_hash_is_stable_and_in_range() -> None:
    values = [unit_hash("split", f"request:t:{i}") for i in range(1000)]
    assert all(0 <= v < 1 for v in values)
    assert unit_hash("a", "b") == unit_hash("a", "b") != unit_hash("a", "c")
    # the recipe any language can follow: SHA-256 of the parts joined by U+001F, the first
    # 8 bytes big-endian over 2**64
    digest = hashlib.sha256(b"split\x1frequest:t:0").digest()
    assert unit_hash("split", "request:t:0") == int.from_bytes(digest[:8], "big") / 2**64


def test_a_split_lands_within_two_points_of_its_weights_over_10000_requests() -> None:
    policy = TrafficPolicy(stable="v1", split={"v1": 90, "v2": 10})
    counts = Counter(assign(policy, "acme", f"r{i}") for i in range(10_000))
    assert abs(counts["v2"] / 10_000 - 0.10) < 0.02
    assert policy.weights() == pytest.approx({"v1": 0.9, "v2": 0.1})


def test_sticky_by_tenant_sends_a_tenant_to_one_version() -> None:
    policy = TrafficPolicy(stable="v1", split={"v1": 50, "v2": 50}, sticky="tenant")
    for tenant in ("acme", "globex", "initech", "umbrella"):
        assert len({assign(policy, tenant, f"r{i}") for i in range(200)}) == 1
    tenants = {assign(policy, f"tenant-{i}", "r") for i in range(200)}
    assert tenants == {"v1", "v2"}


def test_sticky_by_key_sends_a_key_to_one_version_and_falls_back_to_the_request_id() -> None:
    policy = TrafficPolicy(stable="v1", split={"v1": 50, "v2": 50}, sticky="key")
    for key in ("user-1", "user-2", "user-3"):
        assert len({assign(policy, "acme", f"r{i}", key) for i in range(200)}) == 1
    assert {assign(policy, "acme", f"r{i}") for i in range(200)} == {"v1", "v2"}


def test_a_canary_takes_its_share_and_the_rest_goes_to_stable() -> None:
    policy = TrafficPolicy(
        stable="v1", canary=Canary(version="v2", step=1, rules=CanaryRules(steps=(0.05, 0.25)))
    )
    counts = Counter(assign(policy, "acme", f"r{i}") for i in range(10_000))
    assert abs(counts["v2"] / 10_000 - 0.25) < 0.02
    assert policy.weights() == pytest.approx({"v1": 0.75, "v2": 0.25})


def test_a_version_without_a_live_worker_gives_way_to_stable() -> None:
    policy = TrafficPolicy(stable="v1", split={"v1": 10, "v2": 90})
    chosen = {assign(policy, "acme", f"r{i}", live=frozenset({"v1"})) for i in range(100)}
    assert chosen == {"v1"}
    # stable itself without a worker: the request waits for its version (a cold start)
    waiting = {assign(policy, "acme", f"r{i}", live=frozenset()) for i in range(100)}
    assert waiting == {"v1", "v2"}


def test_a_shadow_samples_its_share_and_never_shadows_what_it_serves() -> None:
    policy = TrafficPolicy(stable="v1", shadow=Shadow(version="v2", share=0.3))
    sampled = sum(shadowed(policy, "acme", f"r{i}", "v1") == "v2" for i in range(10_000))
    assert abs(sampled / 10_000 - 0.3) < 0.02
    assert shadowed(policy, "acme", "r1", "v2") is None


def test_policies_that_contradict_themselves_are_refused() -> None:
    with pytest.raises(ValidationError):
        TrafficPolicy(stable="v1", canary=Canary(version="v1"))
    with pytest.raises(ValidationError):
        TrafficPolicy(stable="v1", split={"v1": 1, "v2": 1}, canary=Canary(version="v2"))
    with pytest.raises(ValidationError):
        CanaryRules(steps=(0.5, 0.25))
    with pytest.raises(ValidationError):
        TrafficPolicy(stable="bad version")
