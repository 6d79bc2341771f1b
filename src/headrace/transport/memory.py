"""An in-process transport, for unit tests of what sits on the transport seam (the client,
the dispatcher's shell, the consumers). Not a broker: one process, no durability.

Topics are lists of records per partition; a record's partition is its key's hash (or round
robin without a key). Groups keep committed offsets; the members of a group share its
topics' partitions (partition i goes to member i mod n), and a member hears of a change on
its next poll, as with Kafka. ``MemoryBroker.refuse_writes`` makes every flush fail with
``DeliveryError`` (the records stay pending), for tests of what a broker outage does.
"""

from __future__ import annotations

import itertools
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from headrace.transport.base import (
    Delivered,
    DeliveryError,
    Guarantees,
    Headers,
    Partition,
    Rebalance,
    Record,
    Reset,
    Start,
)

DEFAULT_PARTITIONS = 1


class MemoryBroker:
    def __init__(self, default_partitions: int = DEFAULT_PARTITIONS) -> None:
        self.default_partitions = default_partitions
        self.refuse_writes = False
        self._cond = threading.Condition()
        self._logs: dict[str, list[list[Record]]] = {}
        self._committed: dict[tuple[str, Partition], int] = {}
        self._groups: dict[str, list[MemoryReader]] = {}
        self._round_robin = itertools.count()

    # --- topics ---------------------------------------------------------------------------------
    def create(self, topic: str, partitions: int | None = None) -> None:
        with self._cond:
            if topic not in self._logs:
                self._logs[topic] = [[] for _ in range(partitions or self.default_partitions)]

    def topics(self) -> set[str]:
        with self._cond:
            return set(self._logs)

    def partitions(self, topic: str) -> list[Partition]:
        with self._cond:
            self.create(topic)
            return [(topic, p) for p in range(len(self._logs[topic]))]

    def append(
        self, topic: str, key: bytes | None, value: bytes, headers: Headers = ()
    ) -> Delivered:
        with self._cond:
            self.create(topic)
            log = self._logs[topic]
            index = zlib.crc32(key) if key is not None else next(self._round_robin)
            partition = index % len(log)
            offset = len(log[partition])
            stamp = int(time.time() * 1000)
            log[partition].append(Record(topic, partition, offset, key, value, headers, stamp))
            self._cond.notify_all()
        return Delivered(topic, partition, offset, key)

    def records(self, partition: Partition, offset: int, limit: int) -> list[Record]:
        with self._cond:
            log = self._logs.get(partition[0])
            if log is None or partition[1] >= len(log):
                return []
            return log[partition[1]][offset : offset + limit]

    def end(self, partition: Partition) -> int:
        with self._cond:
            log = self._logs.get(partition[0])
            return len(log[partition[1]]) if log is not None and partition[1] < len(log) else 0

    def wait(self, timeout_s: float) -> None:
        with self._cond:
            self._cond.wait(timeout_s)

    # --- groups ---------------------------------------------------------------------------------
    def commit(self, group: str, offsets: Mapping[Partition, int]) -> None:
        with self._cond:
            for partition, offset in offsets.items():
                self._committed[(group, partition)] = offset

    def committed(self, group: str | None, partition: Partition) -> int | None:
        if group is None:
            return None
        with self._cond:
            return self._committed.get((group, partition))

    def join(self, group: str, reader: MemoryReader) -> None:
        with self._cond:
            members = self._groups.setdefault(group, [])
            if reader not in members:
                members.append(reader)
            self._rebalance(group)

    def leave(self, group: str, reader: MemoryReader) -> None:
        with self._cond:
            members = self._groups.get(group, [])
            if reader in members:
                members.remove(reader)
                self._rebalance(group)

    def _rebalance(self, group: str) -> None:
        members = self._groups[group]
        topics = sorted({t for m in members for t in m.topics})
        partitions = [p for t in topics for p in self.partitions(t)]
        for i, member in enumerate(members):
            mine = [p for j, p in enumerate(partitions) if j % len(members) == i]
            member.next_assignment = [p for p in mine if p[0] in member.topics]


@dataclass
class _State:
    position: int
    paused: bool = False


@dataclass
class MemoryReader:
    broker: MemoryBroker
    group_id: str | None
    reset: Reset = "beginning"
    max_poll_records: int = 500
    topics: list[str] = field(default_factory=list)
    next_assignment: list[Partition] | None = None  # set by the broker on a rebalance
    _listener: Rebalance | None = None
    _states: dict[Partition, _State] = field(default_factory=dict)
    _closed: bool = False

    def subscribe(self, topics: Sequence[str], listener: Rebalance) -> None:
        if self.group_id is None:
            raise ValueError("subscribe needs a group_id")
        self.topics, self._listener = list(topics), listener
        self.broker.join(self.group_id, self)

    def assign(self, topics: Sequence[str], start: Start = "committed") -> list[Partition]:
        partitions = [p for t in topics for p in self.broker.partitions(t)]
        self._states = {p: _State(self._start_of(p, start)) for p in partitions}
        return partitions

    def _start_of(self, partition: Partition, start: Start) -> int:
        if start == "end":
            return self.broker.end(partition)
        if start == "committed":
            committed = self.broker.committed(self.group_id, partition)
            if committed is not None:
                return committed
            if self.reset == "end":
                return self.broker.end(partition)
        return 0

    def poll(self, timeout_ms: int) -> dict[Partition, list[Record]]:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._apply_rebalance()
            out: dict[Partition, list[Record]] = {}
            room = self.max_poll_records
            for partition, state in self._states.items():
                if state.paused or room <= 0:
                    continue
                records = self.broker.records(partition, state.position, room)
                if records:
                    out[partition] = records
                    state.position = records[-1].offset + 1
                    room -= len(records)
            left = deadline - time.monotonic()
            if out or left <= 0:
                return out
            self.broker.wait(min(left, 0.05))

    def _apply_rebalance(self) -> None:
        new = self.next_assignment
        if new is None or self._listener is None:
            return
        self.next_assignment = None
        old = list(self._states)
        if old:
            self._listener.revoked(old)
        self._states = {p: _State(self._start_of(p, "committed")) for p in new}
        self._listener.assigned(list(new))

    def expect(self, *, awaited: bool, flood: bool = False) -> None:
        """Records are handed over the moment they are written: nothing to tune."""

    def pause(self, partitions: Sequence[Partition]) -> None:
        for p in partitions:
            if p in self._states:
                self._states[p].paused = True

    def resume(self, partitions: Sequence[Partition]) -> None:
        for p in partitions:
            if p in self._states:
                self._states[p].paused = False

    def seek(self, partition: Partition, offset: int) -> None:
        self._states[partition].position = offset

    def position(self, partition: Partition) -> int | None:
        state = self._states.get(partition)
        return state.position if state is not None else None

    def highwater(self, partition: Partition) -> int | None:
        return self.broker.end(partition)

    def assignment(self) -> set[Partition]:
        return set(self._states)

    def paused(self) -> set[Partition]:
        return {p for p, s in self._states.items() if s.paused}

    def commit(self, offsets: Mapping[Partition, int], *, sync: bool = True) -> None:
        if self.group_id is None:
            raise ValueError("commit needs a group_id")
        self.broker.commit(self.group_id, offsets)

    def diagnose(self) -> dict[Partition, dict[str, Any]]:
        return {
            p: {"position": s.position, "end": self.broker.end(p), "paused": s.paused}
            for p, s in self._states.items()
        }

    def wakeup(self) -> None:
        """A poll here waits at most 50 ms at a time: nothing to wake."""

    def close(self) -> None:
        if self._listener is not None and self.group_id is not None and not self._closed:
            self.broker.leave(self.group_id, self)
        self._closed = True


class MemoryWriter:
    def __init__(self, broker: MemoryBroker) -> None:
        self.broker = broker
        self._pending: list[tuple[str, bytes | None, bytes, Headers]] = []

    def track(self, topics: Iterable[str]) -> None:
        """Every topic is known here: nothing to learn."""

    def send(
        self, topic: str, value: bytes, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        self._pending.append((topic, key, value, headers))

    def push(self) -> None:
        """Nothing lingers here: ``flush`` appends."""

    def flush(self) -> list[Delivered]:
        if self.broker.refuse_writes and self._pending:
            raise DeliveryError(f"{len(self._pending)} records not delivered: writes refused")
        pending, self._pending = self._pending, []
        return [self.broker.append(*record) for record in pending]

    def close(self, timeout_s: float = 5.0) -> None:
        self._pending.clear()


class MemoryTransport:
    def __init__(
        self, broker: MemoryBroker | None = None, guarantees: Guarantees | None = None
    ) -> None:
        """``guarantees``: what it claims of itself (it loses nothing, and its offsets have
        no gaps); a test of a compensation says it loses records to turn that on."""
        self.broker = broker or MemoryBroker()
        self.guarantees = guarantees or Guarantees()

    def reader(
        self,
        group_id: str | None = None,
        *,
        reset: Reset = "beginning",
        max_poll_records: int = 500,
        busy: Callable[[Partition], bool] | None = None,
    ) -> MemoryReader:
        return MemoryReader(self.broker, group_id, reset, max_poll_records)

    def writer(
        self, delivery_timeout_s: float, *, idempotent: bool = False, shared: bool = False
    ) -> MemoryWriter:
        return MemoryWriter(self.broker)

    def list_topics(self) -> set[str]:
        return self.broker.topics()

    def ensure_topics(self, names: Sequence[str], partitions: int | None = None) -> None:
        for name in names:
            self.broker.create(name, partitions)

    def scan(
        self, topic: str, partition: int | None = None, start: int | None = None
    ) -> Iterator[Record]:
        chosen = self.broker.partitions(topic) if partition is None else [(topic, partition)]
        for p in chosen:
            end = self.broker.end(p)
            offset = start or 0
            while offset < end:
                batch = self.broker.records(p, offset, min(500, end - offset))
                yield from batch
                offset += len(batch)

    def close(self) -> None:
        """Nothing to release."""
