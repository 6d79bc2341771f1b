"""What the dispatcher holds between a request's record and its reply: the requests waiting
(by record and by request id), the batches ready to send, the batches out with a worker, and
the offsets that may be committed once their requests are answered."""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from headrace.schemas.messages import BatchItem, RecordRef
from headrace.workers import metrics
from headrace.workers.batcher import DynamicBatcher
from headrace.workers.offsets import OffsetTracker, Partition

RefKey = tuple[str, int, int]
RequestKey = tuple[str, str]  # (tenant, request_id)


def ref_key(ref: RecordRef) -> RefKey:
    return (ref.topic, ref.partition, ref.offset)


@dataclass
class Pending:
    item: BatchItem
    tokens: int
    failures: int = 0  # batches of this request that crashed or ran past their lease
    solo_failures: int = 0  # ... of those, the ones where it was alone in its batch

    @property
    def key(self) -> RequestKey:
        return (self.item.request.tenant, self.item.request.request_id)


@dataclass
class InFlight:
    bucket: int
    attempt: int
    lease_deadline: float
    pending: dict[RefKey, Pending]
    counted: bool = True  # counts toward the bucket's in-flight limit
    runner: str | None = None  # the worker computing it, once one has started
    lease_s: float = 0.0


@dataclass
class DispatcherStats:
    records: int = 0
    malformed: int = 0
    rejected: int = 0
    duplicates: int = 0
    batches: int = 0
    redispatched: int = 0
    exhausted: int = 0
    cancelled: int = 0
    unavailable: int = 0
    redis_recoveries: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    per_bucket: Counter[int] = field(default_factory=Counter)


class Flights:
    def __init__(self, buckets: list[int]) -> None:
        self.tracker = OffsetTracker()
        self.waiting: dict[RequestKey, list[RecordRef]] = {}  # unanswered, by request id
        self.owner_of: dict[RefKey, RequestKey] = {}  # unanswered, by record
        self.ready: dict[int, deque[list[Pending]]] = {b: deque() for b in buckets}
        self.in_flight: dict[str, InFlight] = {}
        self.in_flight_count: Counter[int] = Counter()

    def alive(self, flight: InFlight) -> list[Pending]:
        """The requests of ``flight`` still unanswered."""
        return [p for k, p in flight.pending.items() if k in self.owner_of]

    def send_out(self, batch_id: str, flight: InFlight) -> None:
        self.in_flight[batch_id] = flight
        self.in_flight_count[flight.bucket] += 1
        metrics.IN_FLIGHT.labels(str(flight.bucket)).set(self.in_flight_count[flight.bucket])

    def uncount(self, flight: InFlight) -> None:
        """``flight`` no longer holds a place under its bucket's in-flight limit."""
        if flight.counted:
            flight.counted = False
            self.in_flight_count[flight.bucket] -= 1
            metrics.IN_FLIGHT.labels(str(flight.bucket)).set(self.in_flight_count[flight.bucket])

    def finish(self, ref: RecordRef) -> None:
        """The request of ``ref`` is answered: it and every copy of it are done."""
        key = self.owner_of.pop(ref_key(ref), None)
        refs = self.waiting.pop(key, [ref]) if key is not None else [ref]
        for each in refs:
            self.owner_of.pop(ref_key(each), None)
            self.tracker.done((each.topic, each.partition), each.offset)

    def forget(self, partitions: list[Partition], batchers: list[DynamicBatcher[Pending]]) -> None:
        """Partitions this dispatcher lost: drop their open requests (their new owner reads
        them again from the committed offset)."""
        gone = set(partitions)
        for batcher in batchers:
            for dropped in batcher.drain(
                lambda p: (p.item.ref.topic, p.item.ref.partition) not in gone
            ):
                key = self.owner_of.pop(ref_key(dropped.item.ref), None)
                if key is not None:
                    self.waiting.pop(key, None)
        self.tracker.forget(partitions)
