"""Limits and their counts in a real Redis: overrides, counts shared by dispatchers, the
backlog over every fresh dispatcher, and the gate before producing."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.limits.gate import STALE_S, Gate
from headrace.limits.policy import TenantLimits, TenantUsage
from headrace.limits.store import BACKLOG_FORGOTTEN_S, BucketBacklog, LimitsStore
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import OverloadedError, QuotaExceededError, RateLimitedError

WALL = 1_800_000_000.0


@pytest.fixture
def settings(stack: LocalStack) -> Settings:
    return Settings(topic_prefix=f"t-limits-{uuid.uuid4().hex[:8]}", max_backlog=100)


@pytest.fixture
def store(settings: Settings) -> LimitsStore:
    return LimitsStore(connections.redis_client(settings), settings.topic_prefix, 3600)


def test_overrides_are_set_read_and_cleared(store: LimitsStore) -> None:
    assert store.overrides() == {}
    store.set_limits("acme", TenantLimits(requests_per_s=5))
    store.set_limits("globex", TenantLimits(tokens_per_window=1000))
    assert store.overrides() == {
        "acme": TenantLimits(requests_per_s=5),
        "globex": TenantLimits(tokens_per_window=1000),
    }
    other = LimitsStore(store.redis, store.prefix, 3600)  # another process sees the edit
    assert store.clear_limits("acme") and not store.clear_limits("acme")
    assert other.overrides() == {"globex": TenantLimits(tokens_per_window=1000)}


def test_a_weight_is_kept_and_an_unreadable_override_falls_back_to_the_defaults(
    store: LimitsStore,
) -> None:
    store.set_limits("gold", TenantLimits(weight=3.0))
    store.redis.hset(f"{store.prefix}:limits", "broken", '{"weight": -1}')  # by hand
    store.redis.incr(f"{store.prefix}:limits:version")
    assert store.overrides() == {"gold": TenantLimits(weight=3.0)}
    with pytest.raises(ValueError, match="weight must be positive"):
        TenantLimits(weight=0)


def test_counts_from_two_dispatchers_add_up_per_tenant(store: LimitsStore) -> None:
    second, window = int(WALL), int(WALL // 3600)
    one = {"acme": TenantUsage(requests={second: 2}, tokens={window: 30})}
    two = {"acme": TenantUsage(requests={second: 1}, tokens={window: 5})}
    store.sync(one, [], WALL)
    seen = store.sync(two, ["globex"], WALL + 0.5)
    assert seen["acme"].requests == {second - 1: 0, second: 3}
    assert seen["acme"].tokens == {window: 35}
    assert seen["globex"] == TenantUsage({second - 1: 0, second: 0}, {window: 0})
    later = store.usage("acme", WALL + 1.2)  # the next second: this one is the previous
    assert later.requests == {second: 3, second + 1: 0}
    assert store.redis.ttl(f"{store.prefix}:rate:acme:{second}") <= 5  # rate keys expire


def test_the_backlog_sums_fresh_dispatchers_and_forgets_gone_ones(store: LimitsStore) -> None:
    store.publish_backlog("d1", {16: BucketBacklog(40, 0.01), 32: BucketBacklog(0, 0.0)}, WALL)
    totals = store.publish_backlog("d2", {16: BucketBacklog(25, 0.02)}, WALL + 1)
    assert totals[16] == BucketBacklog(65, 0.02)
    assert store.backlogs(WALL + 3.5)[16] == BucketBacklog(25, 0.02)  # d1's share is stale
    store.publish_backlog("d3", {}, WALL + BACKLOG_FORGOTTEN_S + 0.5)  # d1 gone a minute
    assert set(store.redis.hkeys(f"{store.prefix}:backlog")) == {b"16:d2"}
    store.withdraw_backlog("d2", [16, 32])
    assert store.backlogs(WALL + 1) == {}


def test_the_gate_refuses_what_is_already_over_and_lets_the_rest_through(
    settings: Settings, store: LimitsStore
) -> None:
    wall = [WALL + 0.5]
    # reads run again at once, in the check (the next test: beside it)
    gate = Gate(store.redis, settings, wall_clock=lambda: wall[0], refresh_in=lambda job: job())
    gate.check("acme", 16, 10, "online")  # nothing published, no limits: through
    store.publish_backlog("d1", {16: BucketBacklog(100, 0.05), 32: BucketBacklog(3, 0.05)}, WALL)
    gate.check("acme", 16, 10, "online")  # what it read is kept for a moment
    wall[0] += 0.6
    with pytest.raises(OverloadedError) as over:
        gate.check("acme", 16, 10, "online")
    assert over.value.retry_after_s >= 1
    gate.check("acme", 32, 10, "online")  # another bucket serves
    gate.check("acme", 16, 10, "bulk")  # bulk waits in its lane instead

    store.set_limits("acme", TenantLimits(requests_per_s=2, tokens_per_window=50))
    second, window = int(WALL), int(WALL // 3600)
    store.sync({"acme": TenantUsage(requests={second: 2})}, [], WALL)
    wall[0] += 0.2
    with pytest.raises(RateLimitedError):
        gate.check("acme", 32, 10, "online")
    wall[0] = WALL + 2.5  # the second has passed
    gate.check("acme", 32, 10, "online")
    store.sync({"acme": TenantUsage(tokens={window: 45})}, [], WALL)
    wall[0] += 0.2
    with pytest.raises(QuotaExceededError) as quota:
        gate.check("acme", 32, 10, "online")
    assert quota.value.retry_after_s > 3000
    gate.check("globex", 32, 10, "online")  # no limits of its own, no defaults
    store.publish_backlog("d1", {32: BucketBacklog(60, 0.05)}, wall[0])
    wall[0] += 0.6  # what the gate read of the backlog is kept that long
    gate.check("globex", 32, 10, "online")  # 60 of 100
    with pytest.raises(OverloadedError) as shed:  # a sheddable one: past half the bound
        gate.check("globex", 32, 10, "online", sheddable=True)
    assert "sheddable" in str(shed.value)


def test_the_gate_reads_again_beside_its_checks(settings: Settings, store: LimitsStore) -> None:
    """Past its moment a read is served while it is read again on the side; only one unread
    for STALE_S is waited for."""
    wall = [WALL + 0.5]
    queued: list[Callable[[], None]] = []
    gate = Gate(store.redis, settings, wall_clock=lambda: wall[0], refresh_in=queued.append)
    gate.check("acme", 16, 10, "online")  # read while the check waits: nothing there
    store.publish_backlog("d1", {16: BucketBacklog(100, 0.05)}, wall[0])
    store.set_limits("acme", TenantLimits(requests_per_s=1))
    store.sync({"acme": TenantUsage(requests={int(wall[0]): 1})}, [], wall[0])
    wall[0] += 0.6
    gate.check("acme", 16, 10, "online")  # what it read before, and two reads queued
    gate.check("acme", 16, 10, "online")  # no second reload of a key while one is queued
    assert len(queued) == 2
    for job in queued:
        job()
    with pytest.raises(OverloadedError):
        gate.check("acme", 16, 10, "online")
    with pytest.raises(RateLimitedError):
        gate.check("acme", 32, 10, "online")
    store.clear_limits("acme")
    wall[0] += STALE_S + 0.1  # unchecked that long: the check waits for a read
    gate.check("acme", 32, 10, "online")
    assert len(queued) == 2


def test_the_gate_opens_when_redis_is_away(settings: Settings) -> None:
    away = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    gate = Gate(connections.redis_client(away, timeout_s=0.5), away)
    gate.check("acme", 16, 10, "online")  # no error: the dispatcher still enforces
    assert gate._open_until > 0
