"""Bucket boundaries: a request of n tokens goes to the smallest bucket whose bound is >= n.

The defaults are finer than powers of two on purpose: on this model every padded token costs
as much as a real one, and finer buckets keep padding efficiency (real / padded) high.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

DEFAULT_BUCKETS: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)


def validate_boundaries(bounds: Sequence[int]) -> list[int]:
    values = list(bounds)
    if not values:
        raise ValueError("at least one bucket boundary is needed")
    if any(b <= 0 for b in values):
        raise ValueError(f"bucket boundaries must be positive: {values}")
    if values != sorted(set(values)):
        raise ValueError(f"bucket boundaries must be strictly increasing: {values}")
    return values


def bucket_for(token_count: int, bounds: Sequence[int]) -> int:
    """The bucket (its upper bound in tokens) for ``token_count``; ValueError past the last."""
    if token_count < 0:
        raise ValueError("token_count must be >= 0")
    index = bisect_left(bounds, token_count)
    if index == len(bounds):
        raise ValueError(f"{token_count} tokens is past the largest bucket ({bounds[-1]})")
    return bounds[index]
