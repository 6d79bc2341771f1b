"""The dynamic batcher, driven by an injected clock (no sleeps, no Kafka)."""

from __future__ import annotations

import pytest

from headrace.workers.dispatcher.batcher import DynamicBatcher
from tests.clock import FakeClock


def make(
    max_batch_tokens: int = 100, max_wait_ms: float = 20
) -> tuple[DynamicBatcher[str], FakeClock]:
    clock = FakeClock()
    return DynamicBatcher(max_batch_tokens, max_wait_ms, clock), clock


def test_timer_starts_at_first_arrival_not_at_last_flush() -> None:
    batcher, clock = make(max_wait_ms=20)
    clock.advance_ms(500)  # idle time before the first arrival does not count
    assert batcher.add("a", 10) == []
    clock.advance_ms(15)
    batcher.add("b", 10)
    assert batcher.due() is None
    assert batcher.seconds_until_due() == pytest.approx(0.005)
    clock.advance_ms(5)
    assert batcher.due() == ["a", "b"]
    assert batcher.due() is None
    assert len(batcher) == 0


def test_budget_counts_rows_times_longest_and_overflow_waits_for_next_batch() -> None:
    batcher, clock = make(max_batch_tokens=100)
    assert batcher.add("a", 30) == []
    assert batcher.add("b", 30) == []  # 2 x 30 = 60
    # 3 x 40 = 120 > 100: the open batch closes, "c" starts the next one
    assert batcher.add("c", 40) == [["a", "b"]]
    assert len(batcher) == 1
    clock.advance_ms(20)
    assert batcher.due() == ["c"]


def test_batch_closes_as_soon_as_no_item_could_fit() -> None:
    batcher, _ = make(max_batch_tokens=100)
    assert batcher.add("a", 50) == []
    assert batcher.add("b", 50) == [["a", "b"]]  # 3 x 50 > 100 whatever comes next


def test_item_larger_than_budget_is_a_batch_of_its_own() -> None:
    batcher, _ = make(max_batch_tokens=100)
    batcher.add("small", 10)
    assert batcher.add("huge", 300) == [["small"], ["huge"]]
    assert len(batcher) == 0


def test_early_flush_when_workers_are_idle() -> None:
    batcher, _ = make(max_wait_ms=1000)
    batcher.add("a", 10)
    assert batcher.due(idle=False) is None
    assert batcher.due(idle=True) == ["a"]
    assert batcher.due(idle=True) is None  # nothing open: nothing to flush


def test_drain_removes_items_and_empties_batch() -> None:
    batcher, _ = make()
    batcher.add("a", 10)
    batcher.add("b", 10)
    assert batcher.drain(lambda item: item != "a") == ["a"]
    assert len(batcher) == 1
    assert batcher.drain(lambda item: False) == ["b"]
    assert batcher.seconds_until_due() is None


def test_rejects_non_positive_budget() -> None:
    with pytest.raises(ValueError):
        DynamicBatcher(0, 10)


def test_a_row_cap_closes_batches_within_the_token_budget() -> None:
    batcher, _ = make(max_batch_tokens=1000)
    batcher.max_rows = 3
    assert batcher.add("a", 10) == [] and batcher.add("b", 10) == []
    assert batcher.add("c", 10) == [["a", "b", "c"]]  # 3 rows: full, though 30 of 1000 tokens
    batcher.max_rows = None
    assert [batcher.add(x, 10) for x in "defg"] == [[], [], [], []]
    assert len(batcher) == 4
