"""The dispatcher's packer: a bucket's waiting requests into batches of similar length (pure,
injected clock).

Every padded token costs as much as a real one (on a CPU, and for an encoder on any device),
and a batch pads every row to its longest. The arrival-order rule (``batcher``) sends a batch
when the next request would not fit; inside a bucket (say 5 to 16 tokens) that mixes short and
long rows. A packer keeps the bucket's waiting requests in a pool and, when it cuts, sorts
them by length and chooses where to cut so that padded tokens plus ``overhead_tokens`` per
batch (what a batch costs beyond its tokens) are least (dynamic programming over the
lengths present), then splits any part over ``max_batch_tokens`` or ``max_rows``.

It cuts when the pool holds ``window`` batches' worth of tokens (then every part but the
longest goes: the rest waits for more of its length), when its oldest request has waited
``max_wait_ms``, or at once when the bucket's workers are idle, so a lone request waits no
longer than with the arrival-order rule.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from headrace.workers.packing import cut_points

T = TypeVar("T")
_EPSILON_S = 1e-9


@dataclass
class Waiting(Generic[T]):
    """An item waiting to be batched: its tokens and when it came (the fair queue's too)."""

    item: T
    tokens: int
    arrived: float


class PackingBatcher(Generic[T]):
    def __init__(
        self,
        max_batch_tokens: int,
        max_wait_ms: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        overhead_tokens: int = 32,
        window: int = 2,
    ) -> None:
        if max_batch_tokens <= 0 or window < 1:
            raise ValueError("max_batch_tokens and window must be positive")
        self.max_batch_tokens = max_batch_tokens
        self.max_rows: int | None = None
        self.max_wait_s = max_wait_ms / 1000.0
        self.overhead_tokens = overhead_tokens
        self.window = window
        self._clock = clock
        self._pool: list[Waiting[T]] = []
        self._tokens = 0

    def __len__(self) -> int:
        return len(self._pool)

    def add(self, item: T, tokens: int) -> list[list[T]]:
        """Add one item; returns the batches this cut (when the pool is full)."""
        self._pool.append(Waiting(item, tokens, self._clock()))
        self._tokens += tokens
        full_rows = self.max_rows is not None and len(self._pool) >= self.window * self.max_rows
        if self._tokens < self.window * self.max_batch_tokens and not full_rows:
            return []
        parts = self._cut()
        self._keep(parts[-1])  # the longest part waits for more of its length (or its time)
        return [[w.item for w in part] for part in parts[:-1]]

    def flush(self, idle: bool = False) -> list[list[T]]:
        """Every batch of the pool if its oldest request's wait is over (or ``idle``)."""
        wait = self.seconds_until_due()
        if wait is None or (not idle and wait > _EPSILON_S):
            return []
        parts = self._cut()
        self._keep([])
        return [[w.item for w in part] for part in parts]

    def seconds_until_due(self) -> float | None:
        if not self._pool:
            return None
        oldest = min(w.arrived for w in self._pool)
        return max(0.0, oldest + self.max_wait_s - self._clock())

    def drain(self, keep: Callable[[T], bool]) -> list[T]:
        """Remove the waiting items for which ``keep`` is false; returns them."""
        dropped = [w.item for w in self._pool if not keep(w.item)]
        if dropped:
            self._keep([w for w in self._pool if keep(w.item)])
        return dropped

    def _keep(self, waiting: list[Waiting[T]]) -> None:
        self._pool = waiting
        self._tokens = sum(w.tokens for w in waiting)

    def _cut(self) -> list[list[Waiting[T]]]:
        """The pool sorted by length, cut where padding plus overhead is least, each part
        then split at the token budget and the row cap."""
        ordered = sorted(self._pool, key=lambda w: w.tokens)
        lengths = sorted({w.tokens for w in ordered})
        counts = [0] * len(lengths)
        index = {n: i for i, n in enumerate(lengths)}
        for w in ordered:
            counts[index[w.tokens]] += 1
        starts = set(cut_points(lengths, counts, self.overhead_tokens))
        parts: list[list[Waiting[T]]] = []
        for w in ordered:
            group = index[w.tokens]
            starts_here = group in starts and (not parts or parts[-1][-1].tokens != w.tokens)
            if not parts or starts_here or not self._fits(parts[-1], w.tokens):
                parts.append([])
            parts[-1].append(w)
        return parts

    def _fits(self, part: list[Waiting[T]], tokens: int) -> bool:
        rows_ok = self.max_rows is None or len(part) + 1 <= self.max_rows
        return rows_ok and (len(part) + 1) * tokens <= self.max_batch_tokens
