"""Warm-up shaped like the traffic (pure): each bucket is warmed with one batch at the
longest length its requests recently had (the worst case the bucket takes, and the peak
memory it needs), never longer than its bound; a bucket with no recorded traffic is warmed
at its bound. One batch per bucket: a restarted worker is ready no later than one warmed at
the bounds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from headrace.workers.backends.base import Shape


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
        shapes.append(Shape(bucket, max(1, min(max(seen), cap)), rows))
    return shapes
