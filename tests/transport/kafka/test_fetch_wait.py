"""The fetch-wait policy with an injected clock."""

from __future__ import annotations

from headrace.config.settings import Settings
from headrace.transport.kafka.fetch_wait import SLOW_READS_S, FetchWait
from tests.clock import FakeClock


def policy(clock: FakeClock) -> FetchWait:
    settings = Settings(
        kafka_fetch_wait_eager_ms=2,
        kafka_fetch_wait_idle_ms=20,
        kafka_fetch_wait_busy_ms=100,
        kafka_fetch_wait_dormant_ms=250,
        kafka_fetch_dormant_after_s=10.0,
    )
    return FetchWait(settings, grace_s=1.0, clock=clock)


def test_quiet_from_the_start_waits_the_idle_time() -> None:
    assert policy(FakeClock()).choose(awaited=False, flood=False) == 20


def test_awaited_is_eager_then_stays_eager_for_the_grace_period() -> None:
    clock = FakeClock()
    wait = policy(clock)
    assert wait.choose(awaited=True, flood=False) == 2
    clock.now += 0.9
    assert wait.choose(awaited=False, flood=False) == 2  # more usually follows
    clock.now += 0.2
    assert wait.choose(awaited=False, flood=False) == 20  # 1.1 s quiet


def test_a_flood_waits_longest_and_counts_as_activity() -> None:
    clock = FakeClock()
    wait = policy(clock)
    assert wait.choose(awaited=True, flood=True) == 100
    clock.now += 0.5
    assert wait.choose(awaited=False, flood=False) == 2  # the flood just ended
    clock.now += 1.0
    assert wait.choose(awaited=False, flood=False) == 20


def test_a_long_silence_is_dormant_until_something_is_awaited() -> None:
    clock = FakeClock()
    wait = policy(clock)
    clock.now += 9.9
    assert wait.choose(awaited=False, flood=False) == 20  # quiet since it started
    clock.now += 0.2
    assert wait.choose(awaited=False, flood=False) == 250  # 10.1 s: dormant
    assert wait.choose(awaited=True, flood=False) == 2  # a record awaited: eager at once
    clock.now += 5.0
    assert wait.choose(awaited=False, flood=False) == 20
    clock.now += 5.1
    assert wait.choose(awaited=False, flood=False) == 250


def test_new_consumer_starts_from_the_busy_wait() -> None:
    wait = policy(FakeClock())
    wait.current_ms = 2
    wait.new_consumer()
    assert wait.current_ms == 100


def test_after_slow_reads_no_wait_is_shorter_than_busy() -> None:
    """A stall (fetches empty though records were there): for SLOW_READS_S the reader waits
    at least busy_ms, eager or idle, also on a replacement consumer."""
    clock = FakeClock()
    wait = policy(clock)
    assert wait.choose(awaited=True, flood=False) == 2
    assert wait.slow_reads() and wait.floor_ms == 100
    assert not wait.slow_reads()  # once
    assert wait.choose(awaited=True, flood=False) == 100
    clock.now += 5
    assert wait.choose(awaited=False, flood=False) == 100  # idle would be 20
    clock.now += 20
    assert wait.choose(awaited=False, flood=False) == 250  # dormant is longer anyway
    wait.new_consumer()
    assert wait.choose(awaited=True, flood=False) == 100
    clock.now += SLOW_READS_S  # the floor lasts so long, then short waits are tried again
    assert wait.choose(awaited=True, flood=False) == 2
