"""The dispatcher: one consumer group over the bucket topics, a dynamic batcher per bucket,
one Celery task per batch, and offsets committed only below the contiguous low-watermark of
answered records. The poll loop never blocks on compute."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kafka import ConsumerRebalanceListener
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import OffsetAndMetadata, TopicPartition
from pydantic import ValidationError

from runtime import connections, metrics
from runtime.models import known_models, model_spec
from runtime.settings import Settings
from schemas.errors import ErrorCode, ErrorInfo, UnknownModelError
from schemas.messages import Batch, BatchItem, DeadLetter, RecordRef, Reply, Request
from schemas.topics import Topics
from workers.admission import admission_error
from workers.batcher import DynamicBatcher
from workers.ledger import Ledger
from workers.offsets import OffsetTracker, Partition
from workers.worker import TASK_NAME

log = logging.getLogger(__name__)

RefKey = tuple[str, int, int]
RequestKey = tuple[str, str]  # (tenant, request_id)
LIVE_WORKER_WINDOW_S = 6.0


def ref_key(ref: RecordRef) -> RefKey:
    return (ref.topic, ref.partition, ref.offset)


@dataclass
class Pending:
    item: BatchItem
    tokens: int


@dataclass
class InFlight:
    bucket: int
    attempt: int
    lease_deadline: float
    pending: dict[RefKey, Pending]
    counted: bool = True  # counts toward the bucket's in-flight limit


@dataclass
class DispatcherStats:
    records: int = 0
    malformed: int = 0
    rejected: int = 0
    duplicates: int = 0
    batches: int = 0
    redispatched: int = 0
    real_tokens: int = 0
    padded_tokens: int = 0
    per_bucket: Counter[int] = field(default_factory=Counter)


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        dispatcher_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.dispatcher_id = dispatcher_id or uuid.uuid4().hex[:12]
        self.clock = clock
        self.topics = Topics(settings.topic_prefix)
        self.bucket_of_topic = {self.topics.requests(b): b for b in settings.buckets}
        connections.ensure_topics(settings, [*self.bucket_of_topic, self.topics.dead_letter])
        self.producer = connections.producer(settings)
        self.celery = connections.celery_app(settings)
        self.ledger = Ledger(
            connections.redis_client(settings), settings.topic_prefix, settings.answered_ttl_s
        )
        self.models = set(known_models())
        self.batchers: dict[int, DynamicBatcher[Pending]] = {
            b: DynamicBatcher(settings.max_batch_tokens, settings.max_wait_ms, clock)
            for b in settings.buckets
        }
        self.ready: dict[int, deque[list[Pending]]] = {b: deque() for b in settings.buckets}
        self.tracker = OffsetTracker()
        self.in_flight: dict[str, InFlight] = {}
        self.in_flight_count: Counter[int] = Counter()
        self.waiting: dict[RequestKey, list[RecordRef]] = {}
        self.owner_of: dict[RefKey, RequestKey] = {}
        self.paused: set[int] = set()
        self.stats = DispatcherStats()
        self.announced = False
        self._fetch_wait_ms = settings.kafka_fetch_wait_busy_ms
        self._answered_now: list[RecordRef] = []
        self._live: dict[int, int] = {}
        self._live_checked = -1e9
        self._last_commit = clock()
        self.consumer = connections.consumer(
            settings, group_id=f"{settings.topic_prefix}.dispatcher", max_poll_records=500
        )
        self.consumer.subscribe(list(self.bucket_of_topic), listener=_Rebalance(self))

    # --- loop ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        log.info("dispatcher %s consuming %d bucket topics", self.dispatcher_id, len(self.batchers))
        try:
            while not stop.is_set():
                self.step()
        finally:
            self.close()

    def step(self) -> None:
        # A lone request (at most one batch in flight) should not wait; a flood keeps the
        # worker busy and the CPU is better spent on the model.
        flood = len(self.in_flight) > 1 or any(len(b) for b in self.batchers.values())
        s = self.settings
        wait_ms = s.kafka_fetch_wait_busy_ms if flood else s.kafka_fetch_wait_eager_ms
        if wait_ms != self._fetch_wait_ms:
            connections.set_fetch_wait(self.consumer, wait_ms)
            self._fetch_wait_ms = wait_ms
        polled = self.consumer.poll(timeout_ms=self._poll_timeout_ms())
        now = time.time()
        for records in polled.values():
            for record in records:
                self._on_record(record, now)
        self._drain_completions()
        self._check_leases()
        self._flush_due()
        if self._answered_now:
            self.producer.flush(timeout=30)
            for ref in self._answered_now:
                self._finish(ref)
            self._answered_now.clear()
        self._maybe_commit()

    def close(self) -> None:
        try:
            self._commit(sync=True)
        finally:
            self.consumer.close(autocommit=False)
            self.producer.close(timeout=5)

    # --- records in ---------------------------------------------------------------------------
    def _on_record(self, record: ConsumerRecord, now: float) -> None:
        ref = RecordRef(topic=record.topic, partition=record.partition, offset=record.offset)
        self.tracker.track((ref.topic, ref.partition), ref.offset)
        self.stats.records += 1
        try:
            request = Request.model_validate_json(record.value)
        except ValidationError as exc:
            self._dead_letter(record, ref, exc)
            return
        problem = self._admission(request)
        if problem is not None:
            self.stats.rejected += 1
            metrics.RECORDS.labels(problem.code.value).inc()
            self._reply_error(
                request.reply_to, request.request_id, request.tenant, request.model, problem, ref
            )
            return
        key = (request.tenant, request.request_id)
        self.owner_of[ref_key(ref)] = key
        if key in self.waiting:  # same request id again while the first is unanswered
            self.waiting[key].append(ref)
            self.stats.duplicates += 1
            metrics.RECORDS.labels("duplicate").inc()
            return
        self.waiting[key] = [ref]
        metrics.RECORDS.labels("accepted").inc()
        bucket = self.bucket_of_topic[record.topic]
        tokens = request.token_count or bucket
        pending = Pending(BatchItem(request=request, ref=ref, arrived_at=now), min(tokens, bucket))
        for batch in self.batchers[bucket].add(pending, pending.tokens):
            self.ready[bucket].append(batch)

    def _admission(self, request: Request) -> ErrorInfo | None:
        try:
            max_tokens = model_spec(request.model).max_tokens
        except UnknownModelError:
            max_tokens = 0
        return admission_error(request, datetime.now(UTC), self.models, max_tokens)

    def _dead_letter(self, record: ConsumerRecord, ref: RecordRef, exc: ValidationError) -> None:
        raw: bytes = record.value or b""
        try:
            parsed: Any = json.loads(raw)
            code = ErrorCode.invalid_schema
        except ValueError:
            parsed, code = None, ErrorCode.invalid_json
        reason = exc.errors(include_url=False, include_input=False)
        message = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or '<root>'}: {e['msg']}" for e in reason[:5]
        )
        self.stats.malformed += 1
        metrics.RECORDS.labels(code.value).inc()
        log.warning("malformed record %s:%d@%d: %s", ref.topic, ref.partition, ref.offset, message)
        letter = DeadLetter(
            source=ref, code=code, reason=message, original=raw.decode("utf-8", errors="replace")
        )
        self.producer.send(self.topics.dead_letter, value=letter.model_dump_json().encode())
        if (
            isinstance(parsed, dict)
            and isinstance(parsed.get("reply_to"), str)
            and isinstance(parsed.get("request_id"), str)
        ):
            self._reply_error(
                parsed["reply_to"],
                parsed["request_id"],
                str(parsed.get("tenant", "")),
                str(parsed.get("model", "")),
                ErrorInfo(code=code, message=message),
                ref,
            )
        else:
            self._answered_now.append(ref)

    def _reply_error(
        self,
        topic: str,
        request_id: str,
        tenant: str,
        model: str,
        error: ErrorInfo,
        ref: RecordRef,
    ) -> None:
        reply = Reply(request_id=request_id, tenant=tenant, model=model, error=error)
        try:
            self.producer.send(
                topic, key=request_id.encode(), value=reply.model_dump_json().encode()
            )
        except Exception:  # an unusable reply_to (bad topic name): the dead letter has it
            log.exception("could not send error reply to %r", topic)
        self._answered_now.append(ref)

    # --- batches out --------------------------------------------------------------------------
    def _flush_due(self) -> None:
        for bucket, batcher in self.batchers.items():
            idle = self.in_flight_count[bucket] + len(self.ready[bucket]) < self._live_workers(
                bucket
            )
            batch = batcher.due(idle=idle)
            if batch:
                self.ready[bucket].append(batch)
            queue = self.ready[bucket]
            while (
                queue
                and self.in_flight_count[bucket] < self.settings.max_inflight_batches_per_bucket
            ):
                self._dispatch(bucket, queue.popleft(), attempt=1)
            self._set_paused(bucket, bool(queue))

    def _dispatch(self, bucket: int, pendings: list[Pending], attempt: int) -> None:
        batch = Batch(
            batch_id=uuid.uuid4().hex,
            bucket=bucket,
            dispatcher_id=self.dispatcher_id,
            attempt=attempt,
            dispatched_at=time.time(),
            items=[p.item for p in pendings],
        )
        self.celery.send_task(
            TASK_NAME, args=[batch.model_dump(mode="json")], queue=self.topics.queue(bucket)
        )
        real = sum(p.tokens for p in pendings)
        padded = len(pendings) * max(p.tokens for p in pendings)
        lease_s = self.settings.lease_base_s + padded / 1000 * self.settings.lease_s_per_1k_tokens
        self.in_flight[batch.batch_id] = InFlight(
            bucket=bucket,
            attempt=attempt,
            lease_deadline=self.clock() + lease_s,
            pending={ref_key(p.item.ref): p for p in pendings},
        )
        self.in_flight_count[bucket] += 1
        self.stats.batches += 1
        self.stats.per_bucket[bucket] += 1
        self.stats.real_tokens += real
        self.stats.padded_tokens += padded
        label = str(bucket)
        metrics.BATCHES.labels(label).inc()
        metrics.REAL_TOKENS.labels(label).inc(real)
        metrics.PADDED_TOKENS.labels(label).inc(padded)
        metrics.IN_FLIGHT.labels(label).set(self.in_flight_count[bucket])

    def _drain_completions(self) -> None:
        for completion in self.ledger.take_completions(self.dispatcher_id):
            for ref in completion.done:
                self._finish(ref)
            flight = self.in_flight.get(completion.batch_id)
            if flight is None:
                continue  # a late answer from an attempt we already sent again
            for ref in completion.done:
                flight.pending.pop(ref_key(ref), None)
            self._uncount(flight)
            if not flight.pending:
                del self.in_flight[completion.batch_id]

    def _check_leases(self) -> None:
        now = self.clock()
        expired = [bid for bid, f in self.in_flight.items() if f.lease_deadline <= now]
        for batch_id in expired:
            flight = self.in_flight.pop(batch_id)
            self._uncount(flight)
            alive = [p for k, p in flight.pending.items() if k in self.owner_of]
            if alive:
                log.warning(
                    "batch %s lease ran out; sending %d requests again", batch_id, len(alive)
                )
                self.stats.redispatched += 1
                metrics.REDISPATCHED.inc()
                self._dispatch(flight.bucket, alive, attempt=flight.attempt + 1)

    def _uncount(self, flight: InFlight) -> None:
        if flight.counted:
            flight.counted = False
            self.in_flight_count[flight.bucket] -= 1
            metrics.IN_FLIGHT.labels(str(flight.bucket)).set(self.in_flight_count[flight.bucket])

    def _finish(self, ref: RecordRef) -> None:
        key = self.owner_of.pop(ref_key(ref), None)
        refs = self.waiting.pop(key, [ref]) if key is not None else [ref]
        for each in refs:
            self.owner_of.pop(ref_key(each), None)
            self.tracker.done((each.topic, each.partition), each.offset)

    # --- flow control and commits ----------------------------------------------------------
    def _live_workers(self, bucket: int) -> int:
        now = self.clock()
        if now - self._live_checked > 1.0:
            try:
                self._live = self.ledger.live_workers(self.settings.buckets, LIVE_WORKER_WINDOW_S)
            except Exception:
                log.warning("could not read worker heartbeats", exc_info=True)
            self._live_checked = now
        return self._live.get(bucket, 0)

    def _set_paused(self, bucket: int, pause: bool) -> None:
        if pause == (bucket in self.paused):
            return
        topic = self.topics.requests(bucket)
        parts = [tp for tp in self.consumer.assignment() if tp.topic == topic]
        if pause:
            self.consumer.pause(*parts)
            self.paused.add(bucket)
        else:
            self.consumer.resume(*parts)
            self.paused.discard(bucket)

    def _poll_timeout_ms(self) -> int:
        """Sleep in poll until the next batch is due; wake often enough to see completions
        (a new record wakes poll at once, and completions are read right after it)."""
        busy = self.in_flight or self._answered_now or any(self.ready.values())
        ceiling = 30 if busy else 100
        waits = [w for b in self.batchers.values() if (w := b.seconds_until_due()) is not None]
        if waits:
            return max(1, min(ceiling, int(min(waits) * 1000)))
        return ceiling

    def _maybe_commit(self) -> None:
        if (self.clock() - self._last_commit) * 1000 >= self.settings.commit_interval_ms:
            self._commit(sync=False)

    def _commit(self, sync: bool, only: list[Partition] | None = None) -> None:
        self._last_commit = self.clock()
        offsets = self.tracker.committable()
        if only is not None:
            offsets = {p: o for p, o in offsets.items() if p in only}
        if not offsets:
            return
        kafka_offsets = {
            TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()
        }
        if sync:
            self.consumer.commit(kafka_offsets)
        else:
            self.consumer.commit_async(kafka_offsets, callback=_log_commit_error)
        self.tracker.mark_committed(offsets)

    def forget_partitions(self, partitions: list[Partition]) -> None:
        gone = set(partitions)
        for batcher in self.batchers.values():
            for dropped in batcher.drain(
                lambda p: (p.item.ref.topic, p.item.ref.partition) not in gone
            ):
                key = self.owner_of.pop(ref_key(dropped.item.ref), None)
                if key is not None:
                    self.waiting.pop(key, None)
        self.tracker.forget(partitions)


def _log_commit_error(offsets: Any, response: Any) -> None:
    if isinstance(response, Exception):
        log.warning("offset commit failed: %s", response)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        parts = [(tp.topic, tp.partition) for tp in revoked]
        try:
            self.dispatcher._commit(sync=True, only=parts)
        except Exception:
            log.warning("commit on revoke failed", exc_info=True)
        self.dispatcher.forget_partitions(parts)

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("assigned %d partitions", len(assigned))
        if assigned and not self.dispatcher.announced:
            self.dispatcher.announced = True
            print(f"READY dispatcher {self.dispatcher.dispatcher_id}", flush=True)
