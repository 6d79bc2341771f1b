"""(b)/(a') split into the cores the workers got and what they made of each (pure)."""

from __future__ import annotations

import pytest

from bench.cpu import Split, cores_busy


def test_cores_busy_is_cpu_seconds_over_the_wall() -> None:
    assert cores_busy({"worker-0": 6.0, "dispatcher": 1.5}, 10.0) == {
        "worker-0": 0.6,
        "dispatcher": 0.15,
    }


def test_the_two_parts_multiply_to_the_ratio_the_tokens_give() -> None:
    # (b): 1,500 useful tokens in 10 s, the workers 6 + 9 CPU seconds (1.5 cores), the rest
    # 3 CPU seconds; (a'): 200 tokens/s from loops making 100 tokens a CPU second (2 cores)
    cpu_s = {"worker-0": 6.0, "worker-1": 9.0, "dispatcher": 2.0, "client": 1.0}
    split = Split.of(cpu_s, 10.0, 1_500, 200.0, 100.0, cores=2)
    assert split.workers_cores == pytest.approx(1.5)
    assert split.loops_cores == pytest.approx(2.0)
    assert split.share == pytest.approx(0.75)
    assert split.per_cpu == pytest.approx(1.0)  # 1,500 tokens / 15 CPU s = 100 a CPU second
    assert split.ratio == pytest.approx((1_500 / 10.0) / 200.0)
    assert split.others == {"dispatcher": pytest.approx(0.2), "client": pytest.approx(0.1)}
    assert split.idle == pytest.approx(0.2)


def test_workers_that_waste_cpu_lower_the_second_part_not_the_first() -> None:
    # the same cores, half the tokens: each CPU second made half as much
    split = Split.of({"worker-0": 15.0}, 10.0, 750, 200.0, 100.0, cores=2)
    assert split.share == pytest.approx(0.75)
    assert split.per_cpu == pytest.approx(0.5)
    assert split.ratio == pytest.approx((750 / 10.0) / 200.0)
    assert split.idle == pytest.approx(0.5)
