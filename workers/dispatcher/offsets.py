"""Contiguous low-watermark per partition: commit an offset only when every record at or
below it is finished (its reply produced)."""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

Partition = tuple[str, int]


@dataclass
class _PartitionState:
    pending: set[int] = field(default_factory=set)
    heap: list[int] = field(default_factory=list)
    next_offset: int | None = None  # one past the highest offset seen
    committed: int | None = None

    def low_watermark(self) -> int | None:
        while self.heap and self.heap[0] not in self.pending:
            heapq.heappop(self.heap)
        if self.heap:
            return self.heap[0]
        return self.next_offset


class OffsetTracker:
    def __init__(self) -> None:
        self._parts: dict[Partition, _PartitionState] = {}

    def track(self, partition: Partition, offset: int) -> None:
        state = self._parts.setdefault(partition, _PartitionState())
        state.pending.add(offset)
        heapq.heappush(state.heap, offset)
        if state.next_offset is None or offset + 1 > state.next_offset:
            state.next_offset = offset + 1

    def done(self, partition: Partition, offset: int) -> None:
        state = self._parts.get(partition)
        if state is not None:
            state.pending.discard(offset)

    def pending_count(self) -> int:
        return sum(len(s.pending) for s in self._parts.values())

    def pending_in(self, partition: Partition) -> int:
        state = self._parts.get(partition)
        return len(state.pending) if state is not None else 0

    def committable(self) -> dict[Partition, int]:
        """Offsets (next record to read) that advanced past the last commit."""
        out: dict[Partition, int] = {}
        for partition, state in self._parts.items():
            mark = state.low_watermark()
            if mark is not None and (state.committed is None or mark > state.committed):
                out[partition] = mark
        return out

    def mark_committed(self, offsets: dict[Partition, int]) -> None:
        for partition, offset in offsets.items():
            state = self._parts.get(partition)
            if state is not None and (state.committed is None or offset > state.committed):
                state.committed = offset

    def committed(self, partition: Partition) -> int | None:
        """The offset last committed for this partition (None before the first commit)."""
        state = self._parts.get(partition)
        return state.committed if state is not None else None

    def expected(self, partition: Partition) -> int | None:
        """The next offset this partition should deliver (None before its first record)."""
        state = self._parts.get(partition)
        return state.next_offset if state is not None else None

    def partitions(self) -> list[Partition]:
        return list(self._parts)

    def forget(self, partitions: list[Partition]) -> None:
        for partition in partitions:
            self._parts.pop(partition, None)


class Gaps:
    """Request topics are neither compacted nor transactional, so a partition's offsets
    are contiguous: a fetch that starts past the next expected offset skipped records (seen
    with a broker recovering its storage), and committing the low-watermark past them would
    lose them. ``check`` says where to read again, up to ``retries`` times in a row."""

    def __init__(self, retries: int = 50) -> None:
        self.retries = retries
        self._tries: dict[Partition, int] = {}

    def check(self, partition: Partition, expected: int | None, first: int) -> int | None:
        """The offset to read ``partition`` from again, or None to take what came."""
        if expected is None or first <= expected:
            self._tries.pop(partition, None)
            return None
        tries = self._tries[partition] = self._tries.get(partition, 0) + 1
        if tries > self.retries:
            log.error(
                "%s:%d: offsets %d..%d never came back; going on without them",
                *partition,
                expected,
                first - 1,
            )
            self._tries.pop(partition, None)
            return None
        log.warning(
            "%s:%d: fetch jumped from offset %d to %d; reading again (try %d)",
            *partition,
            expected,
            first,
            tries,
        )
        return expected
