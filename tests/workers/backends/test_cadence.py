"""How often the continuous decoder lets rows join (``cadence.py``): every ``join_every``
steps, or less often where a prefill costs that much against a step."""

from __future__ import annotations

import pytest

from headrace.workers.backends.cadence import MOST_STEPS, Cadence


def test_before_any_pass_is_measured_rows_join_every_join_every_steps() -> None:
    cadence = Cadence(join_every=4)
    assert cadence.steps_between_joins() == 4
    cadence.stepped(0.004)
    assert cadence.steps_between_joins() == 4  # a step alone says nothing of prefills


def test_prefills_cheap_against_steps_keep_the_cadence() -> None:
    # a CPU's: a prefill of a few rows about a step
    cadence = Cadence(join_every=4)
    cadence.prefilled(0.008)
    cadence.stepped(0.008)
    assert cadence.steps_between_joins() == 4


def test_prefills_dear_against_steps_come_less_often_to_a_quarter_of_the_time() -> None:
    # a GPU's: a prefill launches its kernels one by one (15 ms), a recorded step 4 ms
    cadence = Cadence(join_every=4)
    cadence.prefilled(0.015)
    cadence.stepped(0.004)
    n = cadence.steps_between_joins()
    assert n == 12  # 15 / (12 x 4 + 15) = 0.24
    assert 0.015 / (n * 0.004 + 0.015) <= 0.25 < 0.015 / ((n - 1) * 0.004 + 0.015)


def test_rows_wait_for_the_cadence_at_most_most_steps() -> None:
    cadence = Cadence(join_every=4)
    cadence.prefilled(10.0)
    cadence.stepped(0.001)
    assert cadence.steps_between_joins() == MOST_STEPS


def test_the_costs_are_recent_averages() -> None:
    cadence = Cadence(join_every=1)
    cadence.stepped(0.004)
    cadence.prefilled(0.004)
    for _ in range(30):  # prefills turned dear: the average follows within a few passes
        cadence.prefilled(0.040)
    assert cadence.prefill_s == pytest.approx(0.040, rel=0.01)
    assert cadence.steps_between_joins() == 30
