"""Dynamic batching for one bucket: a small pure object with an injected clock.

A batch's cost is its padded size, ``rows x longest row`` in tokens. The timer starts at the
first arrival. A batch closes when the next item would pass ``max_batch_tokens`` or
``max_rows`` (that item waits for the next batch), when no further item could fit, when
``max_wait_ms`` has passed since the first arrival, or early when the caller says the
bucket's workers are idle. ``max_rows`` (None: no cap) is what the smallest worker's memory
plan holds; it may change between batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")
_EPSILON_S = 1e-9  # float rounding of clock arithmetic must not delay a due batch


@dataclass
class _Open(Generic[T]):
    first_arrival: float
    items: list[T] = field(default_factory=list)
    longest: int = 0

    def cost_with(self, tokens: int) -> int:
        return (len(self.items) + 1) * max(self.longest, tokens)


class DynamicBatcher(Generic[T]):
    def __init__(
        self,
        max_batch_tokens: int,
        max_wait_ms: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_batch_tokens <= 0:
            raise ValueError("max_batch_tokens must be positive")
        self.max_batch_tokens = max_batch_tokens
        self.max_rows: int | None = None
        self.max_wait_s = max_wait_ms / 1000.0
        self._clock = clock
        self._open: _Open[T] | None = None

    def __len__(self) -> int:
        return 0 if self._open is None else len(self._open.items)

    def add(self, item: T, tokens: int) -> list[list[T]]:
        """Add one item of ``tokens`` tokens; returns the batches this closed (0, 1 or 2)."""
        closed: list[list[T]] = []
        if self._open is not None and not self._fits(self._open, tokens):
            closed.append(self._take())
        if self._open is None:
            self._open = _Open(first_arrival=self._clock())
        self._open.items.append(item)
        self._open.longest = max(self._open.longest, tokens)
        # Full: no item of any length can join without passing the budget or the rows.
        if not self._fits(self._open, self._open.longest):
            closed.append(self._take())
        return closed

    def _fits(self, batch: _Open[T], tokens: int) -> bool:
        """One more item of ``tokens`` stays within the budget and the row cap."""
        rows_ok = self.max_rows is None or len(batch.items) + 1 <= self.max_rows
        return rows_ok and batch.cost_with(tokens) <= self.max_batch_tokens

    def due(self, idle: bool = False) -> list[T] | None:
        """The open batch if its wait is over (or ``idle``), else None."""
        if self._open is None:
            return None
        if idle or self._clock() - self._open.first_arrival >= self.max_wait_s - _EPSILON_S:
            return self._take()
        return None

    def flush(self, idle: bool = False) -> list[list[T]]:
        """``due`` as a list of batches (the interface the packer shares)."""
        batch = self.due(idle)
        return [batch] if batch else []

    def seconds_until_due(self) -> float | None:
        if self._open is None:
            return None
        return max(0.0, self._open.first_arrival + self.max_wait_s - self._clock())

    def drain(self, keep: Callable[[T], bool]) -> list[T]:
        """Remove the open items for which ``keep`` is false; returns them."""
        if self._open is None:
            return []
        dropped = [i for i in self._open.items if not keep(i)]
        if dropped:
            kept = [i for i in self._open.items if keep(i)]
            self._open.items = kept
            if not kept:
                self._open = None
        return dropped

    def _take(self) -> list[T]:
        assert self._open is not None
        items = self._open.items
        self._open = None
        return items


class Batcher(Protocol[T]):
    """What the dispatcher's core needs of a bucket's batcher: this arrival-order one, or
    the packer (``packing.PackingBatcher``)."""

    max_rows: int | None

    def __len__(self) -> int: ...

    def add(self, item: T, tokens: int) -> list[list[T]]: ...

    def flush(self, idle: bool = False) -> list[list[T]]: ...

    def seconds_until_due(self) -> float | None: ...

    def drain(self, keep: Callable[[T], bool]) -> list[T]: ...
