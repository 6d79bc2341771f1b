"""Warm-up shaped like the traffic (pure): for each bucket, batches at the lengths its
requests recently had: the median (the common case) and the longest seen (the worst case
the bucket takes); a bucket with no recorded traffic is warmed at its bound."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from headrace.workers.backends.base import Shape


def quantile(histogram: Mapping[int, int], q: float) -> int:
    """The smallest length with at least ``q`` of the counts at or below it."""
    total = sum(histogram.values())
    if total <= 0:
        raise ValueError("an empty histogram has no quantile")
    seen = 0
    for length in sorted(histogram):
        seen += histogram[length]
        if seen >= q * total:
            return length
    return max(histogram)


def warm_up_shapes(
    buckets: Sequence[int],
    lengths: Mapping[int, Mapping[int, int]],
    *,
    rows: int = 4,
    max_tokens: int | None = None,
) -> list[Shape]:
    """The warm-up batches for ``buckets``. ``lengths``: per bucket, request length ->
    count, as recorded by the dispatchers (``headrace.workers.lengths``)."""
    shapes = []
    for bucket in buckets:
        cap = min(bucket, max_tokens) if max_tokens else bucket
        seen = {n: c for n, c in (lengths.get(bucket) or {}).items() if n > 0 and c > 0}
        if not seen:
            shapes.append(Shape(bucket, cap, rows))
            continue
        for length in sorted({quantile(seen, 0.5), max(seen)}):
            shapes.append(Shape(bucket, max(1, min(length, cap)), rows))
    return shapes
