"""The dispatcher's core: every delivery rule, no IO.

It takes events (records read, cancellations, completion notices, heartbeats, outcomes of
its own actions, a tick) and returns actions (batches to send, error replies and dead
letters, commits, pauses, seeks, reply-topic scans), the shape of vLLM v1's scheduler.
It owns the batchers, the flights, the offsets, bucket health, admission and redelivery.
The shell (``headrace.workers.dispatcher.shell``) polls, calls ``handle`` and carries the
actions out; unit tests drive the core with events and an injected clock.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

from cachetools import FIFOCache

from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import (
    Batch,
    BatchItem,
    Completion,
    GenerateParams,
    RecordRef,
    Request,
)
from headrace.transport.base import Partition, Record
from headrace.workers.admission import admission_error
from headrace.workers.batcher import DynamicBatcher
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.flights import (
    DispatcherStats,
    Flights,
    InFlight,
    Pending,
    ref_key,
)
from headrace.workers.dispatcher.observer import Observer
from headrace.workers.dispatcher.recovery import Exhausted, Recovery
from headrace.workers.dispatcher.refusals import Refusals
from headrace.workers.health import BucketHealth, Health
from headrace.workers.intake import Rejection, parse_request
from headrace.workers.offsets import Gaps

log = logging.getLogger(__name__)

CANCELLED_REMEMBERED = 100_000
STATE_LOG_INTERVAL_S = 10.0


class DispatcherCore:
    def __init__(
        self,
        config: CoreConfig,
        clock: Callable[[], float] = time.monotonic,
        observer: Observer | None = None,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.clock = clock
        self.wall_clock = wall_clock
        self.observer = observer or Observer()
        self.topics = config.topics
        self.bucket_of_topic = {config.topics.requests(b): b for b in config.buckets}
        self.flights = Flights(list(config.buckets))
        self.batchers: dict[int, DynamicBatcher[Pending]] = {
            b: DynamicBatcher(config.max_batch_tokens, config.max_wait_ms, clock)
            for b in config.buckets
        }
        self.health = {b: BucketHealth(config.health, clock) for b in config.buckets}
        self.stats = DispatcherStats()
        self.recovery = Recovery(
            config, self.flights, self.health, self.stats, self.observer, clock
        )
        self.paused: set[int] = set()
        self.cancelled: FIFOCache[ev.RequestKey, None] = FIFOCache(maxsize=CANCELLED_REMEMBERED)
        self.live: dict[int, frozenset[str]] = {}
        self.refusals = Refusals()
        self.gaps = Gaps()
        self._last_commit = clock()
        self._state_logged = clock()

    # --- the one entry point ---------------------------------------------------------------
    def handle(self, event: ev.Event) -> list[ev.Action]:
        out: list[ev.Action] = []
        match event:
            case ev.RecordsRead():
                self._records(event.records, event.wall_time, out)
            case ev.Cancelled():
                for key in event.keys:
                    self.cancelled[key] = None
            case ev.CompletionsRead():
                self._completions(event.completions)
            case ev.WorkersSeen():
                self._workers_seen(event, out)
            case ev.StateUnavailable():
                self.recovery.state_failed(event.reason)
            case ev.StateLost():
                self.recovery.state_lost(out)
            case ev.AnswerDeferred():
                self._deferred(event.ref, out)
            case ev.AnswersDelivered():
                for ref in event.refs:
                    self.refusals.delivered(ref)
                    self.flights.finish(ref)
            case ev.BatchNotSent():
                self._not_sent(event.batch_id, out)
            case ev.Settled():
                self._exhaust(self.recovery.settled(event), out)
            case ev.PartitionsRevoked():
                out.append(self._commit(sync=True, only=set(event.partitions)))
                self._forget(list(event.partitions))
            case ev.PartitionsLost():  # a new reader: everything the old one held is gone
                self._forget(self.flights.tracker.partitions())
                self.paused.clear()
            case ev.Tick():
                self._tick(out)
        self.observer.in_flight(self.flights.counts())
        return [a for a in out if not (isinstance(a, ev.Commit) and not a.offsets)]

    # --- what the shell asks -----------------------------------------------------------------
    def in_flight_batch_ids(self) -> list[str]:
        return list(self.flights.in_flight())

    def topic_busy(self, topic: str) -> bool:
        """Records of ``topic`` are batched, in flight or held back: not reading is meant."""
        bucket = self.bucket_of_topic.get(topic)
        if bucket is None:
            return True
        return bool(
            bucket in self.paused
            or self.flights.in_flight_count(bucket)
            or self.flights.ready_count(bucket)
            or len(self.batchers[bucket])
        )

    def awaiting(self) -> tuple[bool, bool]:
        """(a record is awaited: batches in flight; a flood: more than one, or requests
        waiting in batchers) for the reader's fetch hints."""
        in_flight = self.flights.in_flight_total()
        flood = in_flight > 1 or any(len(b) for b in self.batchers.values())
        return bool(in_flight), flood

    def poll_timeout_ms(self, answering: bool = False) -> int:
        """Sleep in poll until the next batch is due; wake often enough to see completions
        (``answering``: the shell has answers to deliver)."""
        busy = answering or self.flights.in_flight_total() or self.flights.total_ready()
        ceiling = 30 if busy else 100
        waits = [w for b in self.batchers.values() if (w := b.seconds_until_due()) is not None]
        if waits:
            return max(1, min(ceiling, int(min(waits) * 1000)))
        return ceiling

    def final_commit(self) -> ev.Commit:
        return self._commit(sync=True)

    def expected_offset(self, partition: Partition) -> int | None:
        return self.flights.tracker.expected(partition)

    def describe(self) -> str:
        f = self.flights
        return (
            f"unanswered {f.waiting_count()} (tracked offsets {f.tracker.pending_count()}): "
            f"open {sum(len(b) for b in self.batchers.values())}, ready {f.total_ready()} "
            f"batches, in flight {f.in_flight_total()} batches ({f.counts()}), "
            f"paused buckets {sorted(self.paused)}, settling {self.recovery.settling} scans"
        )

    # --- records in ----------------------------------------------------------------------------
    def _records(
        self, polled: Mapping[Partition, Sequence[Record]], wall_time: float, out: list[ev.Action]
    ) -> None:
        for partition, records in polled.items():
            if self._skipped(partition, records, out):
                continue
            for record in records:
                self._record(record, wall_time, out)

    def _skipped(
        self, partition: Partition, records: Sequence[Record], out: list[ev.Action]
    ) -> bool:
        """Records that came after a gap are read again from where the gap began."""
        if not self.config.contiguous_offsets or not records:
            return False
        expected = self.flights.tracker.expected(partition)
        again = self.gaps.check(partition, expected, records[0].offset)
        if again is not None:
            out.append(ev.Seek(partition, again))
        return again is not None

    def _record(self, record: Record, wall_time: float, out: list[ev.Action]) -> None:
        ref = RecordRef(topic=record.topic, partition=record.partition, offset=record.offset)
        self.flights.tracker.track(record.tp, ref.offset)
        self.stats.records += 1
        parsed = parse_request(record.value, self.config.max_request_bytes)
        if isinstance(parsed, Rejection):
            self._reject(record, ref, parsed, out)
            return
        request = parsed
        key = (request.tenant, request.request_id)
        bucket = self.bucket_of_topic[record.topic]
        problem = self._admission(request, bucket, wall_time)
        if problem is not None and not self.flights.is_waiting(key):
            self.stats.rejected += 1
            self.observer.record(problem.code.value)
            out.append(self.refusals.not_admitted(request, ref, bucket, wall_time, problem))
            return
        self._admit(request, ref, bucket, wall_time)

    def _reject(self, record: Record, ref: RecordRef, why: Rejection, out: list[ev.Action]) -> None:
        """A record that is no request: dead-lettered, and answered where it names a reply
        topic and a request id."""
        self.stats.malformed += 1
        self.observer.record(why.code.value)
        log.warning("dead letter %s:%d@%d: %s", ref.topic, ref.partition, ref.offset, why.message)
        out.append(self.refusals.malformed(record.value, ref, why))

    def _admit(self, request: Request, ref: RecordRef, bucket: int, wall_time: float) -> None:
        key = (request.tenant, request.request_id)
        if not self.flights.hold(ref, key):  # same request id again while the first waits
            self.stats.duplicates += 1
            self.observer.record("duplicate")
            return
        self.observer.record("accepted")
        tokens = min(request.token_count or bucket, bucket)
        if isinstance(request.params, GenerateParams):  # its KV cache grows as it generates
            tokens += request.params.max_tokens
        pending = Pending(BatchItem(request=request, ref=ref, arrived_at=wall_time), tokens)
        for batch in self.batchers[bucket].add(pending, pending.tokens):
            self.flights.queue(bucket, batch)

    def _admission(self, request: Request, bucket: int, wall_time: float) -> ErrorInfo | None:
        max_tokens = self.config.served.get(request.model, 0)
        now = datetime.fromtimestamp(wall_time, UTC)
        problem = admission_error(request, now, set(self.config.served), max_tokens)
        if problem is not None:
            return problem
        if (request.tenant, request.request_id) in self.cancelled:
            return ErrorInfo(code=ErrorCode.cancelled, message="cancelled before it was computed")
        state = self.health[bucket].state()
        if state is not Health.ok and self.config.degraded_fallback == "error":
            self.stats.unavailable += 1
            reason = "has no live worker" if state is Health.no_workers else "is failing"
            return ErrorInfo(
                code=ErrorCode.unavailable, message=f"bucket {bucket} {reason}; try again later"
            )
        return None

    def _deferred(self, ref: RecordRef, out: list[ev.Action]) -> None:
        """A worker holds the request this core meant to answer: it will answer it."""
        held = self.refusals.deferred(ref)
        if held is None:
            return
        if held.then == "admit":
            self._admit(held.request, ref, held.bucket, held.wall_time)
        elif held.pending is not None:
            self.flights.queue(held.bucket, [held.pending])

    # --- batches out ---------------------------------------------------------------------------
    def _tick(self, out: list[ev.Action]) -> None:
        self._exhaust(self.recovery.check_leases(self.live), out)
        self._flush_due(out)
        self._log_state()
        if (self.clock() - self._last_commit) * 1000 >= self.config.commit_interval_ms:
            out.append(self._commit(sync=False))

    def _flush_due(self, out: list[ev.Action]) -> None:
        limit = self.config.max_inflight_batches_per_bucket
        for bucket, batcher in self.batchers.items():
            counted = self.flights.in_flight_count(bucket)
            idle = counted + self.flights.ready_count(bucket) < len(self.live.get(bucket, ()))
            batch = batcher.due(idle=idle)
            if batch:
                self.flights.queue(bucket, batch)
            while self.flights.in_flight_count(bucket) < limit:
                pendings = self.flights.next_ready(bucket)
                if pendings is None:
                    break
                pendings = self._drop_cancelled(bucket, pendings, out)
                if pendings:
                    out.append(self._dispatch(bucket, pendings))
            self._set_paused(bucket, bool(self.flights.ready_count(bucket)), out)

    def _drop_cancelled(
        self, bucket: int, pendings: list[Pending], out: list[ev.Action]
    ) -> list[Pending]:
        if not self.cancelled:
            return pendings
        keep = []
        for p in pendings:
            if p.key not in self.cancelled:
                keep.append(p)
                continue
            self.stats.cancelled += 1
            out.append(self.refusals.cancelled(p, bucket))
        return keep

    def _dispatch(self, bucket: int, pendings: list[Pending]) -> ev.SendBatch:
        attempt = 1 + max(p.failures for p in pendings)
        batch = Batch(
            batch_id=uuid.uuid4().hex,
            bucket=bucket,
            dispatcher_id=self.config.dispatcher_id,
            attempt=attempt,
            dispatched_at=self.wall_clock(),
            items=[p.item for p in pendings],
        )
        real = sum(p.tokens for p in pendings)
        padded = len(pendings) * max(p.tokens for p in pendings)
        lease_s = self.config.lease_base_s + padded / 1000 * self.config.lease_s_per_1k_tokens
        flight = InFlight(
            bucket=bucket,
            attempt=attempt,
            lease_deadline=self.clock() + lease_s,
            lease_s=lease_s,
            pending={ref_key(p.item.ref): p for p in pendings},
        )
        self.flights.send_out(batch.batch_id, flight)
        self.stats.batches += 1
        self.stats.per_bucket[bucket] += 1
        self.stats.real_tokens += real
        self.stats.padded_tokens += padded
        self.observer.batch(bucket, real, padded)
        return ev.SendBatch(
            batch=batch, queue=self.topics.queue(bucket), real_tokens=real, padded_tokens=padded
        )

    def _not_sent(self, batch_id: str, out: list[ev.Action]) -> None:
        """The queue refused the batch (Redis away): first in line again once it is back."""
        flight = self.flights.take(batch_id)
        if flight is None:
            return
        self.flights.queue(flight.bucket, list(flight.pending.values()), front=True)
        self._set_paused(flight.bucket, True, out)
        self.recovery.state_failed("the batch queue refused a batch")

    def _completions(self, completions: Sequence[Completion]) -> None:
        for completion in completions:
            for ref in completion.done:
                self.flights.finish(ref)
            flight = self.flights.get(completion.batch_id)
            if flight is None:
                continue  # a late answer from an attempt already sent again
            self.health[flight.bucket].record(
                ok=len(completion.done) - completion.failed, failed=completion.failed
            )
            for ref in completion.done:
                flight.pending.pop(ref_key(ref), None)
            self.flights.uncount(flight)
            if not flight.pending:
                self.flights.take(completion.batch_id)

    # --- recovery's outcomes -------------------------------------------------------------------
    def _workers_seen(self, event: ev.WorkersSeen, out: list[ev.Action]) -> None:
        self.recovery.state_ok()
        self.live = {b: frozenset(event.live.get(b, ())) for b in self.config.buckets}
        for bucket, health in self.health.items():
            health.observe_workers(len(self.live[bucket]))
        self.recovery.runners_seen(self.live, event.runners, out)

    def _exhaust(self, exhausted: Exhausted, out: list[ev.Action]) -> None:
        """Requests given up on: answered ``redelivery_exhausted`` and dead-lettered."""
        for pending, bucket in exhausted:
            self.stats.exhausted += 1
            log.error("request %s dead-lettered: failed alone too often", pending.key[1])
            out.append(self.refusals.exhausted(pending, bucket))

    # --- offsets and partitions ----------------------------------------------------------------
    def _commit(self, sync: bool, only: set[Partition] | None = None) -> ev.Commit:
        self._last_commit = self.clock()
        offsets = self.flights.tracker.committable()
        if only is not None:
            offsets = {p: o for p, o in offsets.items() if p in only}
        self.flights.tracker.mark_committed(offsets)
        return ev.Commit(offsets, sync=sync)

    def _forget(self, partitions: list[Partition]) -> None:
        def drain(gone: set[Partition]) -> list[Pending]:
            dropped: list[Pending] = []
            for batcher in self.batchers.values():
                dropped += batcher.drain(lambda p: p.partition not in gone)
            return dropped

        self.flights.forget(partitions, drain)

    def _set_paused(self, bucket: int, pause: bool, out: list[ev.Action]) -> None:
        if pause == (bucket in self.paused):
            return
        if pause:
            self.paused.add(bucket)
        else:
            self.paused.discard(bucket)
        out.append(ev.SetPaused(self.topics.requests(bucket), pause))

    def _log_state(self) -> None:
        """Every STATE_LOG_INTERVAL_S while anything is unanswered: what it waits on."""
        now = self.clock()
        if now - self._state_logged < STATE_LOG_INTERVAL_S or not self.flights.waiting_count():
            return
        self._state_logged = now
        log.info(self.describe())
