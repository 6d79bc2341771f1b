"""Padding math (pure): where to cut rows sorted by length so that padded tokens plus a
cost per batch are least (``cut_points``), and items grouped so (``by_length``). Shared by
the dispatcher's packer (``dispatcher/packer.py``) and the continuous decoder, which
prefills its joining rows in such groups.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def cut_points(lengths: Sequence[int], counts: Sequence[int], overhead_tokens: int) -> list[int]:
    """For groups of rows of increasing ``lengths`` (``counts`` rows each), the indexes at
    which a new batch starts (0 first) that make padded tokens plus ``overhead_tokens`` per
    batch least."""
    n = len(lengths)
    rows = [0] * (n + 1)
    for j, c in enumerate(counts):
        rows[j + 1] = rows[j] + c
    best = [0.0] + [float("inf")] * n  # best[j]: groups 0..j-1 packed
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        width = lengths[j - 1]
        for i in range(j):  # a batch of groups i..j-1, padded to width
            cost = best[i] + (rows[j] - rows[i]) * width + overhead_tokens
            if cost < best[j]:
                best[j], start[j] = cost, i
    cuts, j = [], n
    while j > 0:
        cuts.append(start[j])
        j = start[j]
    return sorted(cuts)


def by_length(items: Sequence[T], lengths: Sequence[int], overhead: int) -> list[list[T]]:
    """``items`` in groups of similar ``lengths``, longest group first and longest first in
    each: the groups that make padded tokens plus ``overhead`` per group least
    (``cut_points``); the continuous decoder prefills its joining rows so."""
    if not items:
        return []
    order = sorted(range(len(items)), key=lambda k: lengths[k])
    distinct = sorted(set(lengths))
    counts = Counter(lengths)
    starts = cut_points(distinct, [counts[n] for n in distinct], overhead)
    groups: list[list[T]] = []
    taken = 0
    for a, b in zip(starts, [*starts[1:], len(distinct)], strict=True):
        size = sum(counts[n] for n in distinct[a:b])
        groups.append([items[k] for k in reversed(order[taken : taken + size])])
        taken += size
    return groups[::-1]
