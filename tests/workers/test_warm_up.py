"""Warm-up shaped like traffic (pure): one batch per bucket at the longest length it saw, at
the bucket's bound when it saw nothing, never past the bucket or the model."""

from __future__ import annotations

from headrace.workers.backends.base import Shape
from headrace.workers.warm_up import warm_up_shapes


def test_a_bucket_with_traffic_is_warmed_at_the_longest_length_it_saw() -> None:
    lengths = {32: {20: 50, 24: 30, 27: 5}, 16: {}}
    assert warm_up_shapes([16, 32], lengths, rows=4) == [
        Shape(16, 16, 4),  # no traffic: the bound
        Shape(32, 27, 4),
    ]


def test_lengths_are_capped_by_the_bucket_and_the_model() -> None:
    assert warm_up_shapes([512], {512: {700: 3}}, max_tokens=384) == [Shape(512, 384, 4)]
    assert warm_up_shapes([64], {64: {10: 1}}, rows=2) == [Shape(64, 10, 2)]
