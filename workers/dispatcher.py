"""The dispatcher: one consumer group over the bucket topics, a dynamic batcher per bucket,
one Celery task per batch, and offsets committed only below the contiguous low-watermark of
answered records. The poll loop never blocks on compute."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kafka import KafkaConsumer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import OffsetAndMetadata, TopicPartition

from headrace import connections
from headrace.config.settings import Settings
from headrace.health.ready import announce_ready
from headrace.models.registry import known_models, model_spec
from headrace.schemas.errors import ErrorCode, ErrorInfo, UnknownModelError
from headrace.schemas.messages import Batch, BatchItem, GenerateParams, RecordRef, Request
from headrace.schemas.topics import Topics
from headrace.transport.kafka import clients as kafka_clients
from headrace.transport.kafka.delivery import DeliveryError, reliable_producer
from headrace.workers import metrics, tasks
from headrace.workers.admission import admission_error
from headrace.workers.batcher import DynamicBatcher
from headrace.workers.control import ControlReader
from headrace.workers.error_replies import ErrorReplies
from headrace.workers.flights import (
    DispatcherStats,
    Flights,
    InFlight,
    Pending,
    RequestKey,
    ref_key,
)
from headrace.workers.health import BucketHealth, Health, HealthPolicy
from headrace.workers.intake import Rejection, parse_request
from headrace.workers.ledger import STATE_ERRORS, Ledger
from headrace.workers.offsets import Partition
from headrace.workers.recovery import Recovery
from headrace.workers.request_consumer import RequestConsumer
from headrace.workers.tasks import TASK_NAME

log = logging.getLogger(__name__)

BEATS_BEFORE_DEAD = 3
STATE_LOG_INTERVAL_S = 10.0
GAP_RETRIES = 50
HOUSEKEEPING_INTERVAL_S = 1.0  # heartbeats, dead runners, Redis epoch
CONTROL_INTERVAL_S = 0.05
CANCELLED_REMEMBERED = 100_000


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
        kafka_clients.ensure_topics(settings, [*self.bucket_of_topic, self.topics.dead_letter])
        # short: a flush that fails is tried again on the next pass, and the poll loop must
        # keep its group membership meanwhile
        self.producer = reliable_producer(settings, timeout_s=3.0)
        self.celery = tasks.celery_app(settings)
        self.ledger = Ledger(
            connections.redis_client(settings), settings.topic_prefix, settings.answered_ttl_s
        )
        # one model per pipeline (topic prefix): its buckets' workers all host it
        self.models = {settings.model} & set(known_models())
        self.batchers: dict[int, DynamicBatcher[Pending]] = {
            b: DynamicBatcher(settings.max_batch_tokens, settings.max_wait_ms, clock)
            for b in settings.buckets
        }
        self.flights = Flights(settings.buckets)
        self.paused: set[int] = set()
        self.stats = DispatcherStats()
        self.errors = ErrorReplies(
            self.producer, self.ledger, self.topics, owner=f"dispatcher-{self.dispatcher_id}"
        )
        self.recovery = Recovery(
            settings, self.ledger, self.flights, self.errors, self.stats, clock
        )
        self.announced = False
        self.report_requested = threading.Event()  # set by SIGUSR2 (the CLI): log_consumer_state
        self._live: dict[int, set[str]] = {}
        self._live_checked = -1e9
        self._control_checked = -1e9
        self._last_commit = clock()
        self._state_down_since: float | None = None
        self._cancelled: OrderedDict[RequestKey, None] = OrderedDict()
        policy = HealthPolicy(
            degrade_after_s=settings.degrade_after_s,
            error_rate=settings.breaker_error_rate,
            min_requests=settings.breaker_min_requests,
            window_s=settings.breaker_window_s,
            cooldown_s=settings.breaker_cooldown_s,
        )
        self.health = {b: BucketHealth(policy, clock) for b in settings.buckets}
        self.control = ControlReader(settings)
        self._state_logged = clock()
        self._gap_retries: dict[TopicPartition, int] = {}
        self.requests = RequestConsumer(
            settings,
            f"{settings.topic_prefix}.dispatcher",
            list(self.bucket_of_topic),
            owner=self,
            clock=clock,
        )

    @property
    def consumer(self) -> KafkaConsumer:
        return self.requests.consumer

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
        # worker busy and the CPU is better spent on the model; quiet for a while: fetch
        # less often (runtime/fetch_wait.py).
        flood = len(self.flights.in_flight) > 1 or any(len(b) for b in self.batchers.values())
        polled = self.requests.poll(
            self._poll_timeout_ms(), awaited=bool(self.flights.in_flight), flood=flood
        )
        now = time.time()
        for tp, records in polled.items():
            if self._skipped_records(tp, records):
                continue
            for record in records:
                self._on_record(record, now)
        self._guarded(self._read_control)
        self._guarded(self._drain_completions)
        self._guarded(self._housekeeping)
        if self.report_requested.is_set():
            self.report_requested.clear()
            self.log_consumer_state()
        self.requests.check()
        self.recovery.check_leases(self._live)
        self._flush_due()
        if self.errors.answered:
            try:
                self.producer.flush()
            except DeliveryError as exc:
                log.warning("error replies not delivered yet (%s); trying again", exc)
                self._maybe_commit()
                return
            if self.errors.to_mark:
                marks = list(self.errors.to_mark)
                if self._guarded(lambda: self.ledger.mark_answered(marks)):
                    self.errors.to_mark.clear()
            for ref in self.errors.answered:
                self.flights.finish(ref)
            self.errors.answered.clear()
        self._maybe_commit()

    def close(self) -> None:
        try:
            self._commit(sync=True)
            self.control.close()
        finally:
            self.consumer.close(autocommit=False)
            self.producer.close()

    def _guarded(self, action: Callable[[], None]) -> bool:
        """Run a step that needs Redis; if Redis is away, log once and carry on polling (Kafka
        holds the requests; nothing is committed past what was answered)."""
        try:
            action()
        except STATE_ERRORS as exc:
            self._state_failed(exc)
            return False
        return True

    def _state_ok(self) -> None:
        if self._state_down_since is not None:
            log.info("Redis reachable again after %.1fs", self.clock() - self._state_down_since)
            self._state_down_since = None

    def _state_failed(self, exc: BaseException) -> None:
        for health in self.health.values():
            health.observe_workers(1)  # unknown is not dead: do not turn requests away for it
        if self._state_down_since is None:
            self._state_down_since = self.clock()
            log.warning("Redis unreachable (%s); batches wait until it is back", exc)

    # --- records in ---------------------------------------------------------------------------
    def _skipped_records(self, tp: TopicPartition, records: list[ConsumerRecord]) -> bool:
        """Request topics are neither compacted nor transactional, so their offsets are
        contiguous: a fetch that starts past the next expected offset skipped records (seen
        as a risk with a broker recovering its storage). Committing the low-watermark past
        them would lose them; read from the expected offset again instead."""
        expected = self.flights.tracker.expected((tp.topic, tp.partition))
        if expected is None or not records or records[0].offset <= expected:
            self._gap_retries.pop(tp, None)
            return False
        tries = self._gap_retries[tp] = self._gap_retries.get(tp, 0) + 1
        if tries > GAP_RETRIES:
            log.error(
                "%s:%d: offsets %d..%d never came back; going on without them",
                tp.topic,
                tp.partition,
                expected,
                records[0].offset - 1,
            )
            self._gap_retries.pop(tp, None)
            return False
        log.warning(
            "%s:%d: fetch jumped from offset %d to %d; reading again (try %d)",
            tp.topic,
            tp.partition,
            expected,
            records[0].offset,
            tries,
        )
        self.consumer.seek(tp, expected)
        return True

    def _on_record(self, record: ConsumerRecord, now: float) -> None:
        ref = RecordRef(topic=record.topic, partition=record.partition, offset=record.offset)
        self.flights.tracker.track((ref.topic, ref.partition), ref.offset)
        self.stats.records += 1
        parsed = parse_request(record.value or b"", self.settings.max_request_bytes)
        if isinstance(parsed, Rejection):
            self.stats.malformed += 1
            metrics.RECORDS.labels(parsed.code.value).inc()
            self.errors.reject(record.value or b"", ref, parsed)
            return
        request = parsed
        key = (request.tenant, request.request_id)
        bucket = self.bucket_of_topic[record.topic]
        problem = self._admission(request, bucket)
        waiting = self.flights.waiting
        if problem is not None and key not in waiting:
            self.stats.rejected += 1
            metrics.RECORDS.labels(problem.code.value).inc()
            if self.errors.reply(
                request.reply_to, request.request_id, key, request.model, problem, ref
            ):
                return
        self.flights.owner_of[ref_key(ref)] = key
        if key in waiting:  # same request id again while the first is unanswered
            waiting[key].append(ref)
            self.stats.duplicates += 1
            metrics.RECORDS.labels("duplicate").inc()
            return
        waiting[key] = [ref]
        metrics.RECORDS.labels("accepted").inc()
        tokens = min(request.token_count or bucket, bucket)
        if isinstance(request.params, GenerateParams):  # its KV cache grows as it generates
            tokens += request.params.max_tokens
        pending = Pending(BatchItem(request=request, ref=ref, arrived_at=now), tokens)
        for batch in self.batchers[bucket].add(pending, pending.tokens):
            self.flights.ready[bucket].append(batch)

    def _admission(self, request: Request, bucket: int) -> ErrorInfo | None:
        try:
            max_tokens = model_spec(request.model).max_tokens
        except UnknownModelError:
            max_tokens = 0
        problem = admission_error(request, datetime.now(UTC), self.models, max_tokens)
        if problem is not None:
            return problem
        if (request.tenant, request.request_id) in self._cancelled:
            return ErrorInfo(code=ErrorCode.cancelled, message="cancelled before it was computed")
        state = self.health[bucket].state()
        if state is not Health.ok and self.settings.degraded_fallback == "error":
            self.stats.unavailable += 1
            reason = "has no live worker" if state is Health.no_workers else "is failing"
            return ErrorInfo(
                code=ErrorCode.unavailable, message=f"bucket {bucket} {reason}; try again later"
            )
        return None

    # --- batches out --------------------------------------------------------------------------
    def _flush_due(self) -> None:
        count = self.flights.in_flight_count
        for bucket, batcher in self.batchers.items():
            queue = self.flights.ready[bucket]
            idle = count[bucket] + len(queue) < len(self._live_workers(bucket))
            batch = batcher.due(idle=idle)
            if batch:
                queue.append(batch)
            while queue and count[bucket] < self.settings.max_inflight_batches_per_bucket:
                pendings = self._drop_cancelled(queue.popleft())
                if not pendings:
                    continue
                try:
                    self._dispatch(bucket, pendings)
                except STATE_ERRORS as exc:  # Redis away: keep the batch for the next pass
                    queue.appendleft(pendings)
                    self._state_failed(exc)
                    break
            self._set_paused(bucket, bool(queue))

    def _drop_cancelled(self, pendings: list[Pending]) -> list[Pending]:
        if not self._cancelled:
            return pendings
        keep = []
        for p in pendings:
            if p.key in self._cancelled:
                info = ErrorInfo(code=ErrorCode.cancelled, message="cancelled before compute")
                request = p.item.request
                if self.errors.reply(
                    request.reply_to, request.request_id, p.key, request.model, info, p.item.ref
                ):
                    self.stats.cancelled += 1
                    continue
            keep.append(p)
        return keep

    def _dispatch(self, bucket: int, pendings: list[Pending]) -> None:
        attempt = 1 + max(p.failures for p in pendings)
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
        flight = InFlight(
            bucket=bucket,
            attempt=attempt,
            lease_deadline=self.clock() + lease_s,
            pending={ref_key(p.item.ref): p for p in pendings},
            lease_s=lease_s,
        )
        self.flights.send_out(batch.batch_id, flight)
        self.stats.batches += 1
        self.stats.per_bucket[bucket] += 1
        self.stats.real_tokens += real
        self.stats.padded_tokens += padded
        label = str(bucket)
        metrics.BATCHES.labels(label).inc()
        metrics.REAL_TOKENS.labels(label).inc(real)
        metrics.PADDED_TOKENS.labels(label).inc(padded)

    def _drain_completions(self) -> None:
        for completion in self.ledger.take_completions(self.dispatcher_id):
            for ref in completion.done:
                self.flights.finish(ref)
            flight = self.flights.in_flight.get(completion.batch_id)
            if flight is None:
                continue  # a late answer from an attempt we already sent again
            self.health[flight.bucket].record(
                ok=len(completion.done) - completion.failed, failed=completion.failed
            )
            for ref in completion.done:
                flight.pending.pop(ref_key(ref), None)
            self.flights.uncount(flight)
            if not flight.pending:
                del self.flights.in_flight[completion.batch_id]

    # --- housekeeping ------------------------------------------------------------------------
    def _housekeeping(self) -> None:
        """Once a second: worker heartbeats, batches whose worker died, Redis data loss."""
        now = self.clock()
        interval = min(HOUSEKEEPING_INTERVAL_S, self.settings.worker_heartbeat_s)
        if now - self._live_checked < interval:
            return
        self._live_checked = now
        self.recovery.check_epoch()
        self._state_ok()
        self._log_state(now)
        self._live = self.ledger.live_workers(
            self.settings.buckets, BEATS_BEFORE_DEAD * self.settings.worker_heartbeat_s
        )
        for bucket, health in self.health.items():
            health.observe_workers(len(self._live.get(bucket, ())))
        self.recovery.check_runners(self._live)

    def _bucket_busy(self, bucket: int) -> bool:
        return bool(
            bucket in self.paused
            or self.flights.in_flight_count[bucket]
            or self.flights.ready[bucket]
            or len(self.batchers[bucket])
        )

    def _log_state(self, now: float) -> None:
        """Every STATE_LOG_INTERVAL_S while anything is unanswered: what it waits on."""
        f = self.flights
        if now - self._state_logged < STATE_LOG_INTERVAL_S or not f.waiting:
            return
        self._state_logged = now
        log.info(
            "unanswered %d (tracked offsets %d): open %d, ready %d batches, in flight %d "
            "batches (%s), paused buckets %s",
            len(f.waiting),
            f.tracker.pending_count(),
            sum(len(b) for b in self.batchers.values()),
            sum(len(q) for q in f.ready.values()),
            len(f.in_flight),
            dict(+f.in_flight_count),
            sorted(self.paused),
        )

    def log_consumer_state(self) -> None:
        """The consumer's partitions (``RequestConsumer.log_partitions``), then the
        in-flight picture."""
        self.requests.log_partitions(self.flights.tracker.expected)
        self._state_logged = -1e9
        self._log_state(self.clock())

    def _read_control(self) -> None:
        now = self.clock()
        if now - self._control_checked < CONTROL_INTERVAL_S:
            return
        self._control_checked = now
        controls = self.control.poll()
        for control in controls:
            key = (control.tenant, control.request_id)
            self.ledger.cancel(*key)
            self._cancelled[key] = None
            if len(self._cancelled) > CANCELLED_REMEMBERED:
                self._cancelled.popitem(last=False)
        if controls:
            self.control.commit()

    # --- flow control and commits ----------------------------------------------------------
    def _live_workers(self, bucket: int) -> set[str]:
        return self._live.get(bucket, set())

    def _set_paused(self, bucket: int, pause: bool) -> None:
        if pause == (bucket in self.paused):
            return
        self.requests.set_paused(self.topics.requests(bucket), pause)
        if pause:
            self.paused.add(bucket)
        else:
            self.paused.discard(bucket)

    def _poll_timeout_ms(self) -> int:
        """Sleep in poll until the next batch is due; wake often enough to see completions
        (a new record wakes poll at once, and completions are read right after it)."""
        f = self.flights
        busy = f.in_flight or self.errors.answered or any(f.ready.values())
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
        offsets = self.flights.tracker.committable()
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
        self.flights.tracker.mark_committed(offsets)

    def forget_partitions(self, partitions: list[Partition]) -> None:
        self.flights.forget(partitions, list(self.batchers.values()))

    # --- the request consumer's owner (workers/request_consumer.py) ---------------------------
    def topic_busy(self, topic: str) -> bool:
        bucket = self.bucket_of_topic.get(topic)
        return bucket is None or self._bucket_busy(bucket)

    def partitions_revoked(self, partitions: list[Partition]) -> None:
        try:
            self._commit(sync=True, only=partitions)
        except Exception:
            log.warning("commit on revoke failed", exc_info=True)
        self.forget_partitions(partitions)

    def partitions_assigned(self, partitions: list[TopicPartition]) -> None:
        if partitions and not self.announced:
            self.announced = True
            announce_ready("dispatcher", self.dispatcher_id)

    def consumer_replaced(self) -> None:
        self.forget_partitions(self.flights.tracker.partitions())
        self.paused.clear()


def _log_commit_error(offsets: Any, response: Any) -> None:
    if isinstance(response, Exception):
        log.warning("offset commit failed: %s", response)
