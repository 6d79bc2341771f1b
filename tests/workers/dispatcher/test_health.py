"""Degradation policy with an injected clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from headrace.workers.dispatcher.health import BucketHealth, Health, HealthPolicy
from tests.clock import FakeClock

POLICY = HealthPolicy(
    degrade_after_s=5, cold_start_s=60, error_rate=0.5, min_requests=10, window_s=30, cooldown_s=10
)


def test_a_bucket_that_never_had_a_worker_is_starting_until_the_cold_start_ends() -> None:
    clock = FakeClock()
    health = BucketHealth(POLICY, clock)
    health.observe_workers(0)
    clock.now += 59.9  # workers still loading their model: its requests queue
    health.observe_workers(0)
    assert health.state() is Health.ok
    clock.now += 0.2  # none came: nobody is coming
    assert health.state() is Health.no_workers
    health.observe_workers(1)
    assert health.state() is Health.ok


def test_a_bucket_that_lost_its_workers_degrades_after_the_grace_and_recovers() -> None:
    clock = FakeClock()
    health = BucketHealth(POLICY, clock)
    clock.now += 30  # the first worker came up after 30 s of cold start
    health.observe_workers(1)
    clock.now += 4.9
    health.observe_workers(0)
    assert health.state() is Health.ok  # a missed beat or two
    clock.now += 0.2
    assert health.state() is Health.no_workers  # it had workers and lost them
    health.observe_workers(1)
    assert health.state() is Health.ok
    clock.now += 5.1  # heartbeats stopped again
    health.observe_workers(0)
    assert health.state() is Health.no_workers


def test_error_rate_opens_the_breaker_for_the_cooldown_then_half_opens() -> None:
    clock = FakeClock()
    health = BucketHealth(POLICY, clock)
    health.observe_workers(1)
    health.record(ok=5, failed=4)
    assert health.state() is Health.ok  # 9 < min_requests
    health.record(ok=0, failed=1)
    assert health.state() is Health.failing  # 5 of 10 failed
    health.observe_workers(1)
    clock.now += 9.9
    health.observe_workers(1)
    health.record(ok=100, failed=0)  # late outcomes while open are ignored
    assert health.state() is Health.failing
    clock.now += 0.2
    assert health.state() is Health.ok  # half-open, empty window
    health.record(ok=2, failed=8)
    assert health.state() is Health.failing  # still failing: open again


def test_old_outcomes_leave_the_window() -> None:
    clock = FakeClock()
    health = BucketHealth(POLICY, clock)
    health.observe_workers(1)
    health.record(ok=0, failed=9)
    clock.now += 31
    health.observe_workers(1)
    health.record(ok=9, failed=1)  # the 9 failures are outside the window now
    assert health.state() is Health.ok


def test_a_healthy_error_rate_stays_ok() -> None:
    clock = FakeClock()
    health = BucketHealth(POLICY, clock)
    health.observe_workers(1)
    for _ in range(10):
        health.record(ok=9, failed=1)
    assert health.state() is Health.ok


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=20),  # seconds since the last outcome
            st.integers(min_value=0, max_value=5),  # ok
            st.integers(min_value=0, max_value=5),  # failed
        ),
        max_size=60,
    )
)
def test_the_breaker_opens_exactly_when_the_window_recounted_says_so(
    outcomes: list[tuple[float, int, int]],
) -> None:
    """The window's sums are kept as it moves (not recounted per answer): the breaker opens
    on the same answer as a recount of what the window holds would open it."""
    clock = FakeClock()
    health = BucketHealth(POLICY, clock)
    window: list[tuple[float, int, int]] = []
    for gap, ok, failed in outcomes:
        clock.now += gap
        was_open = health.state() is Health.failing
        health.record(ok, failed)
        if was_open:
            continue  # ignored while open; the window starts empty after
        window = [w for w in window if w[0] >= clock.now - POLICY.window_s]
        window.append((clock.now, ok, failed))
        total = sum(o + f for _, o, f in window)
        errors = sum(f for _, _, f in window)
        opens = total >= POLICY.min_requests and errors / total >= POLICY.error_rate
        assert (health.state() is Health.failing) == opens
        if opens:
            window = []
