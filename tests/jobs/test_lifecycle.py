"""The job lifecycle: the OpenAI Batch statuses and the only moves between them."""

from __future__ import annotations

import pytest

from headrace.jobs.lifecycle import FINAL, IllegalTransition, JobStatus, check_move

S = JobStatus


def test_the_happy_path_and_the_ways_out() -> None:
    for a, b in [
        (S.validating, S.in_progress),
        (S.in_progress, S.finalizing),
        (S.finalizing, S.completed),
        (S.in_progress, S.cancelling),
        (S.cancelling, S.cancelled),
        (S.in_progress, S.expired),
        (S.validating, S.failed),
    ]:
        check_move(a, b)


def test_final_states_do_not_move() -> None:
    assert {S.completed, S.failed, S.expired, S.cancelled} == FINAL
    for final in FINAL:
        for target in S:
            with pytest.raises(IllegalTransition):
                check_move(final, target)
    with pytest.raises(IllegalTransition, match="a finalizing job cannot become in_progress"):
        check_move(S.finalizing, S.in_progress)
    check_move(S.finalizing, S.cancelling)  # a cancel may land while the output is delivered
    with pytest.raises(IllegalTransition, match="a cancelling job cannot become completed"):
        check_move(S.cancelling, S.completed)
