"""Requests a worker found another attempt answering (``Completion.deferred``): a redelivery
racing its predecessor, or a dead dispatcher's batch still being computed. Part of the core,
no IO. Each is asked for again after a backoff (``DEFER_BASE_S``, doubling up to
``DEFER_MAX_S``), by when that attempt has usually answered it, instead of at the end of its
batch's lease."""

from __future__ import annotations

from collections.abc import Callable

from headrace.transport.base import Partition
from headrace.workers.dispatcher.flights import Pending

DEFER_BASE_S = 0.25
DEFER_MAX_S = 4.0


class Deferrals:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._held: list[tuple[float, int, Pending]] = []  # (due, bucket, request)

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, bucket: int, pending: Pending | None) -> None:
        if pending is None:
            return
        pending.deferrals += 1
        wait = min(DEFER_BASE_S * 2 ** (pending.deferrals - 1), DEFER_MAX_S)
        self._held.append((self.clock() + wait, bucket, pending))

    def due(self) -> list[tuple[int, Pending]]:
        """(bucket, request) of those whose backoff is over, taken out."""
        if not self._held:
            return []
        now = self.clock()
        due = [(b, p) for at, b, p in self._held if at <= now]
        self._held = [h for h in self._held if h[0] > now]
        return due

    def forget(self, partitions: set[Partition]) -> list[Pending]:
        """Those of partitions this dispatcher no longer holds, taken out."""
        gone = [h[2] for h in self._held if h[2].partition in partitions]
        self._held = [h for h in self._held if h[2].partition not in partitions]
        return gone
