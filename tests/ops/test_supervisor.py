"""Restarting workers that end on their own (pure backoff; a real supervised pipeline is in
tests/workers/test_loading.py)."""

from __future__ import annotations

from headrace.ops.supervisor import Backoff


def test_the_delay_doubles_with_each_failure_in_a_row_up_to_its_ceiling() -> None:
    backoff = Backoff(base_s=1, max_s=8, healthy_s=60)
    assert [backoff.ended(2.0) for _ in range(6)] == [1, 2, 4, 8, 8, 8]


def test_a_run_that_lasted_healthy_s_starts_the_count_over() -> None:
    backoff = Backoff(base_s=1, max_s=30, healthy_s=60)
    backoff.ended(1.0)
    backoff.ended(1.0)
    assert backoff.ended(120.0) == 1
    assert backoff.ended(1.0) == 2
