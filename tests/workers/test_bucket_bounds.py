"""Bucket bounds learned from request lengths (pure): the proposal pads no more than any
other choice of as many bounds, keeps the largest bound, and beats the defaults on the
long-tail mix."""

from __future__ import annotations

import itertools
import random

import pytest

from headrace.schemas.buckets import DEFAULT_BUCKETS
from headrace.workers.bucket_bounds import efficiency, propose


def padding(histogram: dict[int, int], bounds: list[int]) -> float:
    e = efficiency(histogram, bounds)
    real = sum(n * c for n, c in histogram.items() if n <= bounds[-1])
    return real / e - real


def test_the_proposal_pads_least_among_every_choice_of_bounds() -> None:
    rng = random.Random(3)
    histogram = {n: rng.randint(1, 50) for n in rng.sample(range(1, 40), 12)}
    top = 40
    for count in (1, 2, 3, 4):
        proposed = propose(histogram, count, top)
        assert len(proposed) == count and proposed[-1] == top
        candidates = sorted(histogram)
        every = [[*cut, top] for cut in itertools.combinations(candidates, count - 1)]
        assert padding(histogram, proposed) == pytest.approx(
            min(padding(histogram, b) for b in every)
        )


def test_few_lengths_get_a_bound_each_and_the_top_stays() -> None:
    assert propose({10: 5, 20: 5}, count=8, top=512) == [10, 20, 512]
    assert efficiency({10: 5, 20: 5}, [10, 20, 512]) == 1.0


def test_on_the_long_tail_mix_the_proposal_beats_the_default_bounds() -> None:
    rng = random.Random(7)
    histogram: dict[int, int] = {}
    for _ in range(20_000):  # 70% under 32 tokens, 25% 32-128, 5% 128-512 (ENVIRONMENT.md)
        pick = rng.random()
        n = (
            rng.randint(5, 31)
            if pick < 0.7
            else rng.randint(32, 128)
            if pick < 0.95
            else rng.randint(129, 512)
        )
        histogram[n] = histogram.get(n, 0) + 1
    default = list(DEFAULT_BUCKETS)
    proposed = propose(histogram, len(default), 512)
    assert efficiency(histogram, proposed) > efficiency(histogram, default)
    finer = propose(histogram, 18, 512)
    assert efficiency(histogram, finer) > efficiency(histogram, proposed) > 0.85
