"""Commit offsets only below the contiguous low-watermark of finished records."""

from __future__ import annotations

from headrace.workers.dispatcher.offsets import OffsetTracker

P = ("topic", 0)


def test_commit_stops_at_first_unfinished_record() -> None:
    tracker = OffsetTracker()
    for offset in range(5):
        tracker.track(P, offset)
    assert tracker.committable() == {P: 0}
    tracker.done(P, 1)
    tracker.done(P, 2)
    assert tracker.committable() == {P: 0}  # 0 is still pending
    tracker.done(P, 0)
    assert tracker.committable() == {P: 3}
    tracker.mark_committed({P: 3})
    assert tracker.committable() == {}
    tracker.done(P, 4)
    tracker.done(P, 3)
    assert tracker.committable() == {P: 5}


def test_partitions_are_independent_and_forget_drops_state() -> None:
    tracker = OffsetTracker()
    q = ("topic", 1)
    tracker.track(P, 10)
    tracker.track(q, 7)
    tracker.done(q, 7)
    assert tracker.committable() == {P: 10, q: 8}
    assert tracker.pending_count() == 1
    tracker.forget([P])
    assert tracker.committable() == {q: 8}


def test_done_twice_and_unknown_are_harmless() -> None:
    tracker = OffsetTracker()
    tracker.track(P, 0)
    tracker.done(P, 0)
    tracker.done(P, 0)
    tracker.done(("other", 3), 9)
    assert tracker.committable() == {P: 1}
