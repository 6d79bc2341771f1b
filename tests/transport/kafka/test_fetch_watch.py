"""FetchWatch: a partition with records past its position that does not move is sought
again after stall_s, then its consumer is replaced. Injected clock."""

from __future__ import annotations

from headrace.transport.kafka.fetch_watch import FetchWatch, Remedy
from tests.clock import FakeClock


def test_stalled_partition_is_sought_then_renewed() -> None:
    clock = FakeClock(0.0)
    watch = FetchWatch(10.0, clock)
    assert watch.observe("p", 345, 411, busy=False) is None
    clock.now = 9.9
    assert watch.observe("p", 345, 411, busy=False) is None
    clock.now = 10.0
    assert watch.observe("p", 345, 411, busy=False) is Remedy.seek
    clock.now = 15.0
    assert watch.observe("p", 345, 411, busy=False) is None  # the seek gets its own stall_s
    clock.now = 20.0
    assert watch.observe("p", 345, 411, busy=False) is Remedy.renew
    clock.now = 21.0
    assert watch.observe("p", 345, 411, busy=False) is None  # a new consumer starts over


def test_moving_caught_up_or_paused_partitions_are_left_alone() -> None:
    clock = FakeClock(0.0)
    watch = FetchWatch(10.0, clock)
    for step in range(5):  # the position moves: not stalled, however long it takes
        clock.now = step * 8.0
        assert watch.observe("moving", 100 + step, 1000, busy=False) is None
    for step in range(5):  # at the log end: nothing to read
        clock.now = step * 8.0
        assert watch.observe("idle", 50, 50, busy=False) is None
    for step in range(5):  # paused by backpressure: not meant to read
        clock.now = step * 8.0
        assert watch.observe("paused", 7, 90, busy=True) is None
    assert watch.observe("unknown", None, 90, busy=False) is None


def test_being_busy_resets_the_stall_timer() -> None:
    clock = FakeClock(0.0)
    watch = FetchWatch(10.0, clock)
    watch.observe("p", 5, 9, busy=False)
    clock.now = 8.0
    watch.observe("p", 5, 9, busy=True)
    clock.now = 12.0
    assert watch.observe("p", 5, 9, busy=False) is None  # the timer started again at 12
    clock.now = 22.0
    assert watch.observe("p", 5, 9, busy=False) is Remedy.seek
