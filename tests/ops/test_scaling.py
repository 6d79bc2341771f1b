"""The autoscaling policy with the time passed in: up at once within its rate, down only
after the stabilization window and one worker a minute, activation, bounds."""

from __future__ import annotations

import itertools

from headrace.ops.scaling import Autoscaler, ScalingPolicy, Schedule

POLICY = ScalingPolicy(threshold_s=5, min_workers=1, max_workers=16)


def test_the_raw_count_is_queued_work_over_the_threshold_within_bounds() -> None:
    assert POLICY.raw(0.2) == 1  # below activation: the minimum
    assert POLICY.raw(5.0) == 1
    assert POLICY.raw(5.1) == 2
    assert POLICY.raw(42) == 9
    assert POLICY.raw(10_000) == 16


def test_up_at_once_but_at_most_doubling_each_period() -> None:
    scaler = Autoscaler(POLICY, replicas=2)
    assert scaler.step(0, queued_work_s=60) == 4  # wants 12: doubles
    assert scaler.step(5, queued_work_s=60) == 4  # same period
    assert scaler.step(15, queued_work_s=60) == 8
    assert scaler.step(30, queued_work_s=60) == 12  # reached


def test_down_waits_for_the_window_and_steps_one_a_minute() -> None:
    scaler = Autoscaler(POLICY, replicas=6)
    scaler.step(0, queued_work_s=30)  # 6 recommended
    t = 15.0
    while t <= 300:  # the window is 300 s, ends included
        assert scaler.step(t, queued_work_s=0) == 6  # 6 is still in the window
        t += 15
    counts = []
    while t < 900:
        counts.append(scaler.step(t, queued_work_s=0))
        t += 15
    assert counts[0] == 5 and counts[-1] == 1
    drops = [a - b for a, b in itertools.pairwise(counts) if a != b]
    assert drops and set(drops) == {1}
    assert counts.count(5) == 4  # one worker a minute (4 polls of 15 s)


def test_a_steady_load_keeps_its_fleet_without_a_backlog() -> None:
    assert POLICY.raw(queued_work_s=0.0, busy_workers=3.5) == 5  # ceil(3.5 / 0.8)
    assert POLICY.raw(queued_work_s=0.0, busy_workers=0.8) == 1
    scaler = Autoscaler(POLICY, replicas=5)
    assert [scaler.step(t, 0.0, busy_workers=3.5) for t in range(0, 1200, 15)] == [5] * 80


def test_a_schedule_holds_its_fleet_over_the_known_burst() -> None:
    policy = ScalingPolicy(schedule=Schedule(start_minute=53, end_minute=60, workers=10))
    hour = 7 * 3600.0
    assert policy.raw(0.0, 0.0, unix_s=hour + 52 * 60) == 1
    assert policy.raw(0.0, 0.0, unix_s=hour + 53 * 60) == 10
    assert policy.raw(0.0, 0.0, unix_s=hour + 59 * 60 + 59) == 10
    assert policy.raw(0.0, 0.0, unix_s=hour + 3600) == 1  # the top of the hour: over
    assert policy.raw(200.0, 0.0, unix_s=hour + 54 * 60) == 16  # the backlog still counts
