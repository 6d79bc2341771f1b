"""Bucket bounds learned from the lengths requests really have (pure).

Every padded token costs as much as a real one, so bounds matter: a request of n tokens is
batched with requests up to its bucket's bound. Given a histogram of request lengths (the
dispatchers keep one in Redis, ``lengths``), ``propose`` finds the ``count`` bounds that pad
least if every row were padded to its bucket's bound (a bound on the waste: a batch pads to
its longest row, which is at most the bound), by dynamic programming over the lengths seen.
The largest bound stays what it was, so no request that fits today is refused.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence


def efficiency(histogram: Mapping[int, int], bounds: Sequence[int]) -> float:
    """Real over padded tokens if each request were padded to its bucket's bound (lengths
    past the last bound are left out)."""
    real = padded = 0
    for length, count in histogram.items():
        index = bisect_left(bounds, length)
        if length <= 0 or count <= 0 or index == len(bounds):
            continue
        real += length * count
        padded += bounds[index] * count
    return real / padded if padded else 1.0


def propose(histogram: Mapping[int, int], count: int, top: int) -> list[int]:
    """``count`` bounds (the last one ``top``) that minimise padding to the bound."""
    if count < 1:
        raise ValueError("at least one bucket")
    seen = sorted(n for n, c in histogram.items() if 0 < n < top and c > 0)
    lengths = [*seen, top]  # the candidates for a bound; the last bucket ends at top
    counts = [histogram.get(n, 0) for n in lengths]
    n = len(lengths)
    if count >= n:
        return lengths
    # prefix sums: requests and tokens of lengths[0..j]
    c_sum, t_sum = [0] * (n + 1), [0] * (n + 1)
    for j, (length, c) in enumerate(zip(lengths, counts, strict=True)):
        c_sum[j + 1] = c_sum[j] + c
        t_sum[j + 1] = t_sum[j] + c * length

    def cost(i: int, j: int) -> int:
        """Padding of lengths[i..j] in one bucket bounded by lengths[j]."""
        return lengths[j] * (c_sum[j + 1] - c_sum[i]) - (t_sum[j + 1] - t_sum[i])

    inf = float("inf")
    # best[j]: least padding of lengths[0..j] in k buckets, the last bounded by lengths[j]
    best = [cost(0, j) for j in range(n)]
    choice: list[list[int]] = [[0] * n]
    for _ in range(1, count):
        nxt: list[float] = [inf] * n
        cut = [0] * n
        for j in range(n):
            for i in range(1, j + 1):  # the last bucket holds lengths[i..j]
                total = best[i - 1] + cost(i, j)
                if total < nxt[j]:
                    nxt[j], cut[j] = total, i
        best = nxt  # type: ignore[assignment]
        choice.append(cut)
    bounds = []
    j = n - 1
    for k in range(count - 1, -1, -1):
        bounds.append(lengths[j])
        i = choice[k][j]
        if k == 0 or i == 0:
            break
        j = i - 1
    return sorted(bounds)
