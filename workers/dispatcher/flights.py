"""What the dispatcher holds between a request's record and its reply: the requests waiting
(by record and by request id), the batches ready to send, the batches out with a worker, and
the offsets that may be committed once their requests are answered."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from headrace.schemas.messages import BatchItem, RecordRef
from headrace.schemas.topics import LANES, Lane
from headrace.transport.base import Partition
from headrace.workers.dispatcher.events import RequestKey
from headrace.workers.dispatcher.offsets import OffsetTracker

RefKey = tuple[str, int, int]


def ref_key(ref: RecordRef) -> RefKey:
    return (ref.topic, ref.partition, ref.offset)


@dataclass
class Pending:
    item: BatchItem
    tokens: int
    failures: int = 0  # batches of this request that crashed or ran past their lease
    solo_failures: int = 0  # ... of those, the ones where it was alone in its batch
    lane: Lane = "online"  # the lane of the topic its record came from
    deferrals: int = 0  # times a worker found another attempt answering it
    alone: bool = False  # computed on its own: never waits on an identical one (coalescing)
    record: bytes | None = None  # its record as read, when its batch may carry it as it is

    @property
    def key(self) -> RequestKey:
        return (self.item.request.tenant, self.item.request.request_id)

    @property
    def partition(self) -> Partition:
        return (self.item.ref.topic, self.item.ref.partition)


@dataclass
class InFlight:
    bucket: int
    attempt: int
    lease_deadline: float
    lease_s: float
    pending: dict[RefKey, Pending]
    counted: bool = True  # holds a place under its bucket's in-flight limit
    runner: str | None = None  # the worker computing it, once one has started
    lane: Lane = "online"
    waiting_since: float | None = None  # its lease first extended: no live worker for it
    waiting_said: float = 0.0  # when the log last said so


@dataclass
class DispatcherStats:
    records: int = 0
    malformed: int = 0
    rejected: int = 0
    duplicates: int = 0
    already_answered: int = 0  # read again after a takeover, found answered in the ledger
    forwarded: int = 0
    batches: int = 0
    redispatched: int = 0
    exhausted: int = 0
    cancelled: int = 0
    shadowed: int = 0  # requests copied to a shadow version
    unavailable: int = 0
    redis_recoveries: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    per_bucket: Counter[int] = field(default_factory=Counter)


class Flights:
    def __init__(self, buckets: list[int]) -> None:
        self.buckets = list(buckets)
        self.tracker = OffsetTracker()
        self._waiting: dict[RequestKey, list[RecordRef]] = {}  # unanswered, by request id
        self._owner_of: dict[RefKey, RequestKey] = {}  # unanswered, by record
        self._ready: dict[tuple[int, Lane], deque[list[Pending]]] = {
            (b, lane): deque() for b in buckets for lane in LANES
        }
        self._in_flight: dict[str, InFlight] = {}
        self._counted: Counter[tuple[int, Lane]] = Counter()
        self._counted_total = 0  # the sum of _counted: every bucket's places taken
        self.counts_changed = 0  # moves with each change of ``counts()``
        self.on_finish: Callable[[RefKey], None] | None = None  # each record answered

    # --- requests -------------------------------------------------------------------------
    def hold(self, ref: RecordRef, key: RequestKey) -> bool:
        """Hold ``ref`` until its request is answered; False if that request id is already
        held by another record (a duplicate: both are done when it is answered)."""
        self._owner_of[ref_key(ref)] = key
        refs = self._waiting.get(key)
        if refs is not None:
            refs.append(ref)
            return False
        self._waiting[key] = [ref]
        return True

    def is_waiting(self, key: RequestKey) -> bool:
        return key in self._waiting

    def waiting_count(self) -> int:
        return len(self._waiting)

    def finish(self, ref: RecordRef) -> None:
        """The request of ``ref`` is answered: it and every copy of it are done."""
        key = self._owner_of.pop(ref_key(ref), None)
        refs = self._waiting.pop(key, [ref]) if key is not None else [ref]
        for each in refs:
            each_key = ref_key(each)
            self._owner_of.pop(each_key, None)
            self.tracker.done(each_key[:2], each_key[2])
            if self.on_finish is not None:
                self.on_finish(each_key)

    def alive(self, pendings: Iterator[Pending] | list[Pending]) -> list[Pending]:
        """Those of ``pendings`` still unanswered."""
        return [p for p in pendings if ref_key(p.item.ref) in self._owner_of]

    # --- batches ready to send ------------------------------------------------------------
    def queue(self, bucket: int, pendings: list[Pending], *, front: bool = False) -> None:
        """A batch ready to send, in the lane its requests came by."""
        ready = self._ready[bucket, pendings[0].lane]
        if front:
            ready.appendleft(pendings)
        else:
            ready.append(pendings)

    def next_ready(self, bucket: int, lane: Lane = "online") -> list[Pending] | None:
        ready = self._ready[bucket, lane]
        return ready.popleft() if ready else None

    def ready_count(self, bucket: int, lane: Lane | None = None) -> int:
        # asked a few dozen times a pass (every bucket, both lanes): no generator
        if lane is not None:
            return len(self._ready[bucket, lane])
        ready = self._ready
        return len(ready[bucket, "online"]) + len(ready[bucket, "bulk"])

    def total_ready(self) -> int:
        return sum(len(q) for q in self._ready.values())

    # --- batches out with a worker --------------------------------------------------------
    def send_out(self, batch_id: str, flight: InFlight) -> None:
        self._in_flight[batch_id] = flight
        self._counted[flight.bucket, flight.lane] += 1
        self._counted_total += 1
        self.counts_changed += 1

    def get(self, batch_id: str) -> InFlight | None:
        return self._in_flight.get(batch_id)

    def take(self, batch_id: str) -> InFlight | None:
        """Remove the batch from flight (and from its bucket's in-flight count)."""
        flight = self._in_flight.pop(batch_id, None)
        if flight is not None:
            self.uncount(flight)
        return flight

    def take_all(self) -> list[InFlight]:
        flights = [f for b in list(self._in_flight) if (f := self.take(b)) is not None]
        return flights

    def uncount(self, flight: InFlight) -> None:
        """``flight`` no longer holds a place under its bucket's in-flight limit."""
        if flight.counted:
            flight.counted = False
            self._counted[flight.bucket, flight.lane] -= 1
            self._counted_total -= 1
            self.counts_changed += 1

    def in_flight(self) -> dict[str, InFlight]:
        """A copy: callers may take batches out while they go through it."""
        return dict(self._in_flight)

    def in_flight_total(self) -> int:
        return len(self._in_flight)

    def in_flight_count(self, bucket: int, lane: Lane | None = None) -> int:
        counted = self._counted
        if lane is not None:
            return counted[bucket, lane]
        return counted[bucket, "online"] + counted[bucket, "bulk"]

    def in_flight_beside(self, bucket: int, buckets: list[int]) -> int:
        """Batches in flight (under their limits) of ``buckets`` other than ``bucket``."""
        if len(buckets) == len(self.buckets):  # every bucket: what all hold, less its own
            return self._counted_total - self.in_flight_count(bucket)
        return sum(self.in_flight_count(b) for b in buckets if b != bucket)

    def unstarted(self, bucket: int) -> int:
        """Batches of ``bucket`` in flight under its limit with no worker known to run them
        (maybe still in Celery's queue)."""
        return sum(
            1
            for f in self._in_flight.values()
            if f.bucket == bucket and f.counted and f.runner is None
        )

    def unanswered_rows(self, bucket: int, lane: Lane) -> int:
        """Requests of ``bucket``'s ``lane`` in batches ready or out, not yet answered."""
        ready = sum(len(batch) for batch in self._ready[bucket, lane])
        out = sum(
            len(f.pending)
            for f in self._in_flight.values()
            if f.bucket == bucket and f.lane == lane
        )
        return ready + out

    def counts(self) -> dict[int, int]:
        """Batches in flight per bucket (both lanes), every bucket."""
        return {b: self.in_flight_count(b) for b in self.buckets}

    # --- partitions -----------------------------------------------------------------------
    def forget(
        self, partitions: list[Partition], drain: Callable[[set[Partition]], list[Pending]]
    ) -> None:
        """Partitions this dispatcher lost: drop their open requests (``drain`` takes them
        out of the batchers; their new owner reads them again from the committed offset)."""
        gone = set(partitions)
        for dropped in drain(gone):
            key = self._owner_of.pop(ref_key(dropped.item.ref), None)
            if key is not None:
                self._waiting.pop(key, None)
        self.tracker.forget(partitions)
