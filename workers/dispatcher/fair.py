"""Fair share inside one bucket and lane: per-tenant queues, deficit round robin by tokens,
in priority bands (pure, injected clock).

What the dispatcher reads waits here, one queue per tenant, until a batch is to be formed;
then the next items are taken round the tenants, each given ``quantum x weight`` tokens a
turn (Shreedhar and Varghese's deficit round robin, by tokens rather than bytes), so a batch
is filled from tenants in proportion to their weights, not to their arrival rates. A tenant
alone takes everything (work-conserving). Bands go strictly in order (``interactive``, then
``default``, then ``sheddable`` and anything else: ``schemas.messages.priority_rank``), each
with its own round.

Batches are formed as late as they can be, when the bucket has a free slot or this lane has
no batch ready (``take``), so the choice is made over every tenant's waiting requests. The
items chosen go through an inner batcher (the packer or the arrival-order rule), which cuts
them as it always has.

Kafka stays the buffer: the lane's topic is paused once ``read_ahead_tokens`` wait here
(``full``), as the backlog bound pauses. Fairness covers what has been read; a tenant that
floods past that for long is what rate limits and the backlog bound are for.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from headrace.workers.dispatcher.batcher import Batcher
from headrace.workers.dispatcher.packer import Waiting

T = TypeVar("T")

_EPSILON_S = 1e-9


@dataclass
class _Round(Generic[T]):
    """One band's deficit round robin over its tenants' queues."""

    queues: dict[str, deque[Waiting[T]]] = field(default_factory=dict)
    turns: deque[str] = field(default_factory=deque)  # tenants with work, in turn order
    deficit: dict[str, float] = field(default_factory=dict)
    credited: bool = False  # the tenant at the head of ``turns`` has had its quantum

    def push(self, tenant: str, waiting: Waiting[T]) -> None:
        queue = self.queues.get(tenant)
        if queue is None:
            queue = self.queues[tenant] = deque()
            self.turns.append(tenant)
            self.deficit[tenant] = 0.0
        queue.append(waiting)

    def pop(self, quantum: float, weight: Callable[[str], float]) -> Waiting[T] | None:
        while self.turns:
            tenant = self.turns[0]
            queue = self.queues[tenant]
            if not self.credited:
                self.deficit[tenant] += quantum * weight(tenant)
                self.credited = True
            head = queue[0]
            if head.tokens <= self.deficit[tenant]:
                queue.popleft()
                self.deficit[tenant] -= head.tokens
                if not queue:  # no work, no credit kept (DRR's rule)
                    self._leave(tenant)
                return head
            self.turns.rotate(-1)
            self.credited = False
        return None

    def _leave(self, tenant: str) -> None:
        del self.queues[tenant], self.deficit[tenant]
        if self.turns and self.turns[0] == tenant:
            self.turns.popleft()
            self.credited = False
        else:
            self.turns.remove(tenant)

    def drain(self, keep: Callable[[T], bool]) -> list[T]:
        dropped: list[T] = []
        for tenant in list(self.queues):
            queue = self.queues[tenant]
            dropped += [w.item for w in queue if not keep(w.item)]
            kept = deque(w for w in queue if keep(w.item))
            if kept:
                self.queues[tenant] = kept
            else:
                self._leave(tenant)
        return dropped

    def waiting(self) -> Iterable[Waiting[T]]:
        for queue in self.queues.values():
            yield from queue


class FairBatcher(Generic[T]):
    def __init__(
        self,
        inner: Batcher[T],
        *,
        tenant_of: Callable[[T], str],
        band_of_item: Callable[[T], int],
        weight: Callable[[str], float] = lambda _: 1.0,
        batch_tokens: int,
        max_wait_ms: float,
        read_ahead_tokens: int,
        quantum: float = 256.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``batch_tokens``: the inner batcher's budget (a batch's worth waiting may be formed
        before its wait is over). ``weight(tenant)``: its share (> 0; equal by default)."""
        if quantum <= 0 or read_ahead_tokens <= 0:
            raise ValueError("quantum and read_ahead_tokens must be positive")
        self.inner = inner
        self.tenant_of = tenant_of
        self.band_of_item = band_of_item
        self.weight = weight
        self.batch_tokens = batch_tokens
        self.max_wait_s = max_wait_ms / 1000.0
        self.read_ahead_tokens = read_ahead_tokens
        self.quantum = quantum
        self._clock = clock
        self._bands: dict[int, _Round[T]] = {}
        self._count = 0
        self._tokens = 0

    @property
    def max_rows(self) -> int | None:
        return self.inner.max_rows

    @max_rows.setter
    def max_rows(self, rows: int | None) -> None:
        self.inner.max_rows = rows

    def __len__(self) -> int:
        return self._count + len(self.inner)

    def queued(self) -> int:
        """Items waiting for their turn (not yet with the inner batcher)."""
        return self._count

    def full(self) -> bool:
        """``read_ahead_tokens`` wait: the lane's topic should be paused."""
        return self._tokens >= self.read_ahead_tokens

    def add(self, item: T, tokens: int) -> list[list[T]]:
        """Queue ``item`` for its tenant; batches are formed by ``take`` (so never here)."""
        rank = self.band_of_item(item)
        band = self._bands.get(rank)
        if band is None:  # (setdefault would build a round for every item)
            band = self._bands[rank] = _Round()
        band.push(self.tenant_of(item), Waiting(item, tokens, self._clock()))
        self._count += 1
        self._tokens += tokens
        return []

    def take(self, idle: bool, room: bool) -> list[list[T]]:
        """The batches to queue now. ``idle``: the bucket has a free slot; ``room``: this
        lane has no batch ready. Idle: one batch's worth is taken in turn and cut. With room
        only: so once a batch's worth waits or the oldest has waited ``max_wait_ms``.
        Otherwise only what the inner batcher holds (all of it when idle, else what is due)."""
        if self._count and (idle or (room and (self._batch_waits() or self._overdue()))):
            while self._count:
                closed = self.inner.add(*self._pop())
                if closed:
                    return closed
            return self.inner.flush(idle=True)
        return self.inner.flush(idle=idle)

    def seconds_until_due(self, room: bool = True) -> float | None:
        """When ``take`` has something to do (None: nothing waits); without ``room`` only
        the inner batcher's wait counts (what is queued waits for a slot, not a time)."""
        queued = self._oldest_wait() if room else None
        waits = [w for w in (self.inner.seconds_until_due(), queued) if w is not None]
        return min(waits) if waits else None

    def drain(self, keep: Callable[[T], bool]) -> list[T]:
        dropped = self.inner.drain(keep)
        for band in self._bands.values():
            gone = band.drain(keep)
            dropped += gone
        self._recount()
        return dropped

    # --- inside ----------------------------------------------------------------------------------
    def _pop(self) -> tuple[T, int]:
        for rank in sorted(self._bands):
            waiting = self._bands[rank].pop(self.quantum, self.weight)
            if waiting is not None:
                self._count -= 1
                self._tokens -= waiting.tokens
                return waiting.item, waiting.tokens
        raise LookupError("nothing queued")

    def _batch_waits(self) -> bool:
        rows = self.inner.max_rows
        return self._tokens >= self.batch_tokens or (rows is not None and self._count >= rows)

    def _oldest_wait(self) -> float | None:
        heads = [q[0].arrived for b in self._bands.values() for q in b.queues.values()]
        if not heads:
            return None
        return max(0.0, min(heads) + self.max_wait_s - self._clock())

    def _overdue(self) -> bool:
        wait = self._oldest_wait()
        return wait is not None and wait <= _EPSILON_S

    def _recount(self) -> None:
        waiting = [w for band in self._bands.values() for w in band.waiting()]
        self._count = len(waiting)
        self._tokens = sum(w.tokens for w in waiting)
