"""The dispatcher: one consumer group over the bucket topics, a dynamic batcher per bucket,
one Celery task per batch, and offsets committed only below the contiguous low-watermark of
answered records. The poll loop never blocks on compute."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter, OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import redis
from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import OffsetAndMetadata, TopicPartition
from kombu.exceptions import OperationalError

from consumers.replies import stream_replies
from runtime import connections, metrics
from runtime.delivery import DeliveryError, ReliableProducer
from runtime.models import known_models, model_spec
from runtime.settings import Settings
from schemas.errors import ErrorCode, ErrorInfo, UnknownModelError
from schemas.messages import Batch, BatchItem, DeadLetter, RecordRef, Reply, Request
from schemas.topics import Topics
from workers.admission import admission_error
from workers.batcher import DynamicBatcher
from workers.control import ControlReader
from workers.health import BucketHealth, Health, HealthPolicy
from workers.intake import Rejection, parse_request
from workers.ledger import SENDING_PREFIX, ClaimState, Ledger
from workers.offsets import OffsetTracker, Partition
from workers.worker import TASK_NAME

log = logging.getLogger(__name__)

RefKey = tuple[str, int, int]
RequestKey = tuple[str, str]  # (tenant, request_id)
BEATS_BEFORE_DEAD = 3
LEASE_HARD_FACTOR = 3  # a live worker may hold a batch this many leases before it is resent
REPLY_SCAN_IDLE_S = 0.5
REJOIN_AFTER_S = 20.0
STATE_LOG_INTERVAL_S = 10.0
GAP_RETRIES = 50
HOUSEKEEPING_INTERVAL_S = 1.0  # heartbeats, dead runners, Redis epoch
CONTROL_INTERVAL_S = 0.05
CANCELLED_REMEMBERED = 100_000
# Redis (and the Celery broker on it) unreachable: retry on the next pass instead of dying.
STATE_ERRORS = (redis.RedisError, OperationalError, OSError)


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

    def alive_items(self, owner_of: dict[RefKey, RequestKey]) -> list[Pending]:
        return [p for k, p in self.pending.items() if k in owner_of]


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
        # short: a flush that fails is tried again on the next pass, and the poll loop must
        # keep its group membership meanwhile
        self.producer = ReliableProducer(lambda: connections.producer(settings), timeout_s=3.0)
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
        self._to_mark: list[RequestKey] = []  # answered here: mark in the ledger after flush
        self._live: dict[int, set[str]] = {}
        self._live_checked = -1e9
        self._control_checked = -1e9
        self._last_commit = clock()
        self._epoch: str | None = None
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
        self._assignment_checked = clock()
        self._unassigned_since: float | None = clock()
        self.consumer = self._new_consumer()

    def _new_consumer(self) -> KafkaConsumer:
        consumer = connections.consumer(
            self.settings,
            group_id=f"{self.settings.topic_prefix}.dispatcher",
            max_poll_records=500,
        )
        consumer.subscribe(list(self.bucket_of_topic), listener=_Rebalance(self))
        return consumer

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
        for tp, records in polled.items():
            if self._skipped_records(tp, records):
                continue
            for record in records:
                self._on_record(record, now)
        self._guarded(self._read_control)
        self._guarded(self._drain_completions)
        self._guarded(self._housekeeping)
        self._check_assignment()
        self._check_leases()
        self._flush_due()
        if self._answered_now:
            try:
                self.producer.flush()
            except DeliveryError as exc:
                log.warning("error replies not delivered yet (%s); trying again", exc)
                self._maybe_commit()
                return
            if self._to_mark:
                marks = list(self._to_mark)
                if self._guarded(lambda: self.ledger.mark_answered(marks)):
                    self._to_mark.clear()
            for ref in self._answered_now:
                self._finish(ref)
            self._answered_now.clear()
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
        expected = self.tracker.expected((tp.topic, tp.partition))
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
        self.tracker.track((ref.topic, ref.partition), ref.offset)
        self.stats.records += 1
        parsed = parse_request(record.value or b"", self.settings.max_request_bytes)
        if isinstance(parsed, Rejection):
            self._dead_letter(record, ref, parsed)
            return
        request = parsed
        key = (request.tenant, request.request_id)
        bucket = self.bucket_of_topic[record.topic]
        problem = self._admission(request, bucket)
        if problem is not None and key not in self.waiting:
            self.stats.rejected += 1
            metrics.RECORDS.labels(problem.code.value).inc()
            if self._reply_error(
                request.reply_to, request.request_id, key, request.model, problem, ref
            ):
                return
        self.owner_of[ref_key(ref)] = key
        if key in self.waiting:  # same request id again while the first is unanswered
            self.waiting[key].append(ref)
            self.stats.duplicates += 1
            metrics.RECORDS.labels("duplicate").inc()
            return
        self.waiting[key] = [ref]
        metrics.RECORDS.labels("accepted").inc()
        tokens = request.token_count or bucket
        pending = Pending(BatchItem(request=request, ref=ref, arrived_at=now), min(tokens, bucket))
        for batch in self.batchers[bucket].add(pending, pending.tokens):
            self.ready[bucket].append(batch)

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

    def _dead_letter(self, record: ConsumerRecord, ref: RecordRef, why: Rejection) -> None:
        raw: bytes = record.value or b""
        self.stats.malformed += 1
        metrics.RECORDS.labels(why.code.value).inc()
        log.warning("dead letter %s:%d@%d: %s", ref.topic, ref.partition, ref.offset, why.message)
        letter = DeadLetter(
            source=ref,
            code=why.code,
            reason=why.message,
            original=raw.decode("utf-8", errors="replace"),
        )
        self.producer.send(self.topics.dead_letter, letter.model_dump_json().encode())
        if why.reply_to is not None and why.request_id is not None:
            info = ErrorInfo(code=why.code, message=why.message)
            key = (why.tenant, why.request_id)
            if self._reply_error(why.reply_to, why.request_id, key, why.model, info, ref):
                return
        self._answered_now.append(ref)

    def _reply_error(
        self,
        topic: str,
        request_id: str,
        key: RequestKey,
        model: str,
        error: ErrorInfo,
        ref: RecordRef,
    ) -> bool:
        """Answer with ``error`` unless this request was answered already. Returns False when a
        worker holds the request right now: the caller should queue it like any other."""
        owner = f"dispatcher-{self.dispatcher_id}"
        try:
            state = self.ledger.claim([key], owner=owner, lease_ms=60_000)[0]
        except STATE_ERRORS:  # cannot check: answering twice beats never answering
            state = ClaimState.fresh
        if state is ClaimState.busy:
            return False
        if state is ClaimState.answered:
            self._answered_now.append(ref)  # a redelivered record: its reply exists
            return True
        reply = Reply(request_id=request_id, tenant=key[0], model=model, error=error)
        try:
            self.producer.send(topic, reply.model_dump_json().encode(), key=request_id.encode())
        except Exception:  # an unusable reply_to (bad topic name): the dead letter has it
            log.exception("could not send error reply to %r", topic)
        self._answered_now.append(ref)
        self._to_mark.append(key)
        return True

    # --- batches out --------------------------------------------------------------------------
    def _flush_due(self) -> None:
        for bucket, batcher in self.batchers.items():
            idle = self.in_flight_count[bucket] + len(self.ready[bucket]) < len(
                self._live_workers(bucket)
            )
            batch = batcher.due(idle=idle)
            if batch:
                self.ready[bucket].append(batch)
            queue = self.ready[bucket]
            while (
                queue
                and self.in_flight_count[bucket] < self.settings.max_inflight_batches_per_bucket
            ):
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
                if self._reply_error(
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
        self.in_flight[batch.batch_id] = InFlight(
            bucket=bucket,
            attempt=attempt,
            lease_deadline=self.clock() + lease_s,
            pending={ref_key(p.item.ref): p for p in pendings},
            lease_s=lease_s,
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
            self.health[flight.bucket].record(
                ok=len(completion.done) - completion.failed, failed=completion.failed
            )
            for ref in completion.done:
                flight.pending.pop(ref_key(ref), None)
            self._uncount(flight)
            if not flight.pending:
                del self.in_flight[completion.batch_id]

    # --- attempts that died or ran late -----------------------------------------------------
    def _check_leases(self) -> None:
        """A batch no worker has started within its lease is sent again (its first copy may
        sit in a lost queue). One a live worker is computing keeps its lease, up to
        LEASE_HARD_FACTOR leases: its claims keep a second copy from computing meanwhile."""
        now = self.clock()
        for batch_id, flight in list(self.in_flight.items()):
            if flight.lease_deadline > now:
                continue
            if flight.runner is not None and flight.runner in self._all_live():
                overdue = now - flight.lease_deadline
                if overdue < (LEASE_HARD_FACTOR - 1) * flight.lease_s:
                    continue
            elif flight.runner is None and not self._live_workers(flight.bucket):
                # no worker to take it: sending it again would change nothing, and it is not
                # the request's fault (a lost queue is caught by the Redis epoch check)
                flight.lease_deadline = now + flight.lease_s
                continue
            del self.in_flight[batch_id]
            log.warning("batch %s ran past its lease (runner %s)", batch_id, flight.runner)
            # never started: its copy sat in a queue or was lost with a worker that died
            # before claiming it; that says nothing about its requests, so it is not counted
            self._redeliver(flight, counted=flight.runner is not None)

    def _housekeeping(self) -> None:
        """Once a second: worker heartbeats, batches whose worker died, Redis data loss."""
        now = self.clock()
        interval = min(HOUSEKEEPING_INTERVAL_S, self.settings.worker_heartbeat_s)
        if now - self._live_checked < interval:
            return
        self._live_checked = now
        self._check_epoch()
        self._state_ok()
        self._log_state(now)
        self._live = self.ledger.live_workers(
            self.settings.buckets, BEATS_BEFORE_DEAD * self.settings.worker_heartbeat_s
        )
        for bucket, health in self.health.items():
            health.observe_workers(len(self._live.get(bucket, ())))
        if not self.in_flight:
            return
        live = self._all_live()
        batch_ids = list(self.in_flight)
        for batch_id, runner in zip(batch_ids, self.ledger.runners(batch_ids), strict=True):
            flight = self.in_flight[batch_id]
            flight.runner = runner or flight.runner
            if flight.runner is None or flight.runner in live:
                continue
            del self.in_flight[batch_id]
            log.warning("worker %s died computing batch %s", flight.runner, batch_id)
            self._recover_dead_attempt(batch_id, flight)

    def _check_assignment(self) -> None:
        """A consumer left without partitions for REJOIN_AFTER_S (seen after tansu lost its
        S3 store for a while: the group forgot the member and the member never rejoined) is
        replaced by a fresh one, which joins the group again."""
        now = self.clock()
        if now - self._assignment_checked < 1.0:
            return
        self._assignment_checked = now
        if self.consumer.assignment():
            self._unassigned_since = None
            return
        if self._unassigned_since is None:
            self._unassigned_since = now
            return
        if now - self._unassigned_since < REJOIN_AFTER_S:
            return
        log.warning(
            "no partitions for %.0fs; joining the group again", now - self._unassigned_since
        )
        self.forget_partitions(self.tracker.partitions())
        try:
            self.consumer.close(autocommit=False)
        except Exception:
            log.warning("closing the stuck consumer failed", exc_info=True)
        self.paused.clear()
        self._fetch_wait_ms = self.settings.kafka_fetch_wait_busy_ms
        self.consumer = self._new_consumer()
        self._unassigned_since = now

    def _log_state(self, now: float) -> None:
        """Every STATE_LOG_INTERVAL_S while anything is unanswered: what it waits on."""
        if now - self._state_logged < STATE_LOG_INTERVAL_S or not self.waiting:
            return
        self._state_logged = now
        log.info(
            "unanswered %d (tracked offsets %d): open %d, ready %d batches, in flight %d "
            "batches (%s), paused buckets %s",
            len(self.waiting),
            self.tracker.pending_count(),
            sum(len(b) for b in self.batchers.values()),
            sum(len(q) for q in self.ready.values()),
            len(self.in_flight),
            dict(+self.in_flight_count),
            sorted(self.paused),
        )

    def _all_live(self) -> set[str]:
        return set().union(*self._live.values())

    def _recover_dead_attempt(self, batch_id: str, flight: InFlight) -> None:
        """Its worker died. Requests it was still computing are released and sent again; for
        those whose replies it was sending, the reply topic says whether they went out."""
        alive = flight.alive_items(self.owner_of)
        holders = self.ledger.holders([p.key for p in alive])
        sending = [
            p for p, h in zip(alive, holders, strict=True) if h and h.startswith(SENDING_PREFIX)
        ]
        answered = self._answered_on_reply_topics(sending) if sending else set()
        done = [p for p in alive if p.key in answered]
        self.ledger.mark_answered([p.key for p in done])
        for p in done:
            self._finish(p.item.ref)
        self.ledger.release([p.key for p in alive if p.key not in answered], owner=batch_id)
        self.ledger.end_batch(batch_id)
        self._redeliver(flight)

    def _answered_on_reply_topics(self, pendings: list[Pending]) -> set[RequestKey]:
        """Which of ``pendings`` have a reply on their reply topic (read from its start)."""
        wanted: dict[str, set[RequestKey]] = {}
        for p in pendings:
            wanted.setdefault(p.item.request.reply_to, set()).add(p.key)
        found: set[RequestKey] = set()
        for topic, keys in wanted.items():
            for reply in stream_replies(
                self.settings, topic, from_beginning=True, idle_timeout_s=REPLY_SCAN_IDLE_S
            ):
                if (reply.tenant, reply.request_id) in keys:
                    found.add((reply.tenant, reply.request_id))
        log.info("reply scan: %d of %d requests already answered", len(found), len(pendings))
        return found

    def _redeliver(self, flight: InFlight, counted: bool = True) -> None:
        """Send a crashed or late batch's unanswered requests again, split in halves so a
        request that kills its batch ends up alone; failing alone ``max_attempts`` times, it
        is dead-lettered with ``redelivery_exhausted``. ``counted``: the attempt failed while
        a worker computed it (else it is sent again as it was, with no failure counted)."""
        self._uncount(flight)
        alive = flight.alive_items(self.owner_of)
        if not alive:
            return
        self.stats.redispatched += 1
        metrics.REDISPATCHED.inc()
        if not counted:
            self.ready[flight.bucket].appendleft(alive)
            return
        for p in alive:
            p.failures += 1
        if len(alive) == 1:
            alive[0].solo_failures += 1
            if alive[0].solo_failures >= self.settings.max_attempts:
                self._exhaust(alive[0])
                return
        half = (len(alive) + 1) // 2
        for part in (alive[:half], alive[half:]):
            if part:
                self.ready[flight.bucket].appendleft(part)

    def _exhaust(self, pending: Pending) -> None:
        request, ref = pending.item.request, pending.item.ref
        message = (
            f"its batch crashed or ran past its lease {pending.failures} times, "
            f"{pending.solo_failures} of them with this request alone"
        )
        info = ErrorInfo(code=ErrorCode.redelivery_exhausted, message=message)
        if not self._reply_error(
            request.reply_to, request.request_id, pending.key, request.model, info, ref
        ):
            self.ready[self.bucket_of_topic[ref.topic]].append([pending])  # still being computed
            return
        self.stats.exhausted += 1
        log.error("request %s dead-lettered: %s", request.request_id, message)
        letter = DeadLetter(
            source=ref, code=info.code, reason=message, original=request.model_dump_json()
        )
        self.producer.send(self.topics.dead_letter, letter.model_dump_json().encode())

    def _check_epoch(self) -> None:
        epoch = self.ledger.epoch(uuid.uuid4().hex)
        if self._epoch is not None and epoch != self._epoch:
            self._recover_lost_state()
        self._epoch = epoch

    def _recover_lost_state(self) -> None:
        """Redis came back empty: the Celery queues, claims, completion notices and answered
        marks are gone. Kafka still has the truth: requests whose reply is on their reply topic
        are done (and marked again); the others are sent again."""
        self.stats.redis_recoveries += 1
        flights = list(self.in_flight.values())
        self.in_flight.clear()
        for flight in flights:
            self._uncount(flight)
        answered = self._answered_on_reply_topics(
            [p for flight in flights for p in flight.alive_items(self.owner_of)]
        )
        self.ledger.mark_answered(sorted(answered))
        resent = 0
        for flight in flights:
            again = []
            for k, p in flight.pending.items():
                if k not in self.owner_of:
                    continue
                if p.key in answered:
                    self._finish(p.item.ref)
                else:
                    again.append(p)
            if again:
                resent += len(again)
                self.ready[flight.bucket].appendleft(again)
        log.warning(
            "Redis lost its data: %d in-flight requests already answered, %d sent again",
            len(answered),
            resent,
        )

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
    def _live_workers(self, bucket: int) -> set[str]:
        return self._live.get(bucket, set())

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
