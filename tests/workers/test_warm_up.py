"""Warm-up shaped like traffic (pure): the median and the longest length a bucket saw, at
the bucket's bound when it saw nothing, never past the bucket or the model."""

from __future__ import annotations

import pytest

from headrace.workers.backends.base import Shape
from headrace.workers.warm_up import quantile, warm_up_shapes


def test_a_bucket_with_traffic_is_warmed_at_its_median_and_longest_length() -> None:
    lengths = {32: {20: 50, 24: 30, 31: 5}, 16: {}}
    assert warm_up_shapes([16, 32], lengths, rows=4) == [
        Shape(16, 16, 4),  # no traffic: the bound
        Shape(32, 20, 4),
        Shape(32, 31, 4),
    ]


def test_lengths_are_capped_by_the_bucket_and_the_model() -> None:
    assert warm_up_shapes([512], {512: {700: 3}}, max_tokens=384) == [Shape(512, 384, 4)]
    assert warm_up_shapes([64], {64: {10: 1}}, rows=2) == [Shape(64, 10, 2)]


def test_quantiles_of_a_histogram() -> None:
    assert quantile({10: 1, 20: 1, 30: 2}, 0.5) == 20
    assert quantile({10: 1, 20: 1, 30: 2}, 0.99) == 30
    with pytest.raises(ValueError):
        quantile({}, 0.5)
