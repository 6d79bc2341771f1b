"""Records in, for the dispatcher's core (no IO): a gap is read again; each record is
parsed, counted with the model's tokenizer, routed (here, onward to its proper bucket, or
too long: ``routing``), screened (``screening``), checked (model, deadline, cancellation,
the bucket's health and queued work: the degradation ladder, its backlog bound, the
tenant's limits) and put in its bucket's batcher, or answered, dead-lettered or forwarded."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from cachetools import FIFOCache

from headrace.health.tracing import TRACEPARENT, valid_traceparent
from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import BatchItem, Degraded, RecordRef, Request
from headrace.schemas.topics import Lane, Topics
from headrace.transport.base import Partition, Record
from headrace.workers.admission import admission_error
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.coalescing import Coalescer
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.fair import FairBatcher
from headrace.workers.dispatcher.flights import DispatcherStats, Flights, Pending
from headrace.workers.dispatcher.health import BucketHealth, Health
from headrace.workers.dispatcher.intake import Rejection, parse_request
from headrace.workers.dispatcher.ladder import Reason, descend, late
from headrace.workers.dispatcher.observer import Observer
from headrace.workers.dispatcher.offsets import Gaps
from headrace.workers.dispatcher.quotas import Quotas
from headrace.workers.dispatcher.refusals import Refusals
from headrace.workers.dispatcher.routing import Onward, TokenCounter, count_requests, route
from headrace.workers.dispatcher.screening import Screen

log = logging.getLogger(__name__)


class RecordsIn:
    def __init__(
        self,
        config: CoreConfig,
        bucket_of_topic: Mapping[str, int | None],
        lane_of_topic: Mapping[str, Lane],
        flights: Flights,
        batchers: Mapping[tuple[int, Lane], FairBatcher[Pending]],
        health: Mapping[int, BucketHealth],
        cancelled: FIFOCache[ev.RequestKey, None],
        refusals: Refusals,
        stats: DispatcherStats,
        observer: Observer,
        count_tokens: TokenCounter,
        quotas: Quotas,
        expected_wait_s: Callable[[int], float | None] = lambda _: None,
        reply_topic_exists: Callable[[str], bool] = lambda _: True,
        coalescer: Coalescer | None = None,
    ) -> None:
        """``expected_wait_s``: what the work queued in a bucket needs (None: not known).
        ``coalescer``: identical requests in flight (none: each is computed)."""
        self.config = config
        self.coalescer = coalescer if coalescer is not None else Coalescer(enabled=False)
        self.screen = Screen(config, reply_topic_exists)
        self.expected_wait_s = expected_wait_s
        self.quotas = quotas
        self.topics: Topics = config.topics
        self.bucket_of_topic = bucket_of_topic
        self.lane_of_topic = lane_of_topic
        self.flights = flights
        self.batchers = batchers
        self.health = health
        self.cancelled = cancelled
        self.refusals = refusals
        self.stats = stats
        self.observer = observer
        self.count_tokens = count_tokens
        self.gaps = Gaps()
        self._served = frozenset(config.served)
        self._outcomes: Counter[str] = Counter()  # told the observer once a poll
        self._now: tuple[float, datetime] = (0.0, datetime.fromtimestamp(0, UTC))  # (wall, it)

    def read(
        self,
        polled: Mapping[Partition, Sequence[Record]],
        wall_time: float,
        out: list[ev.Action],
        answered: frozenset[ev.RequestKey] = frozenset(),
    ) -> None:
        """``answered``: requests the ledger has as answered (done at once, not batched).
        The poll's requests are counted in one call of the tokenizer."""
        records = [
            record
            for partition, held in polled.items()
            if not self._skipped(partition, held, out)
            for record in held
        ]
        parsed = [parse_request(r.value, self.config.max_request_bytes) for r in records]
        counts = count_requests(self.count_tokens, parsed)
        for record, request, counted in zip(records, parsed, counts, strict=True):
            try:
                self._record(record, request, counted, wall_time, out, answered)
            except Exception as exc:  # one record never stops the dispatcher
                log.exception("record %s:%d@%d failed", *record.tp, record.offset)
                self._failed(record, exc, out)
        self._tell_outcomes()

    def _outcome(self, outcome: str) -> None:
        self._outcomes[outcome] += 1

    def _tell_outcomes(self) -> None:
        """The records' outcomes to the observer, each once with its count (a metric's
        increment per record cost a microsecond of each)."""
        for outcome, count in self._outcomes.items():
            self.observer.record(outcome, count)
        self._outcomes.clear()

    def _failed(self, record: Record, exc: Exception, out: list[ev.Action]) -> None:
        """A record the core raised on: dead-lettered (``internal``), answered where it names
        a reply topic and a request id, and the rest of the poll goes on."""
        ref = self._tracked(record)
        why = Rejection(ErrorCode.internal, f"the dispatcher failed on it: {type(exc).__name__}")
        parsed = parse_request(record.value, self.config.max_request_bytes)
        if isinstance(parsed, Request):
            why = replace(why, reply_to=parsed.reply_to, request_id=parsed.request_id)
            why = replace(why, tenant=parsed.tenant, model=parsed.model)
        self.stats.malformed += 1
        out.append(self.refusals.malformed(record.value, ref, why))

    def _tracked(self, record: Record) -> RecordRef:
        """The record's reference, its offset tracked (answered or not, it must be done
        before its partition's offsets move past it)."""
        # validated: pydantic-core's constructor is twice as fast as model_construct's Python
        ref = RecordRef(topic=record.topic, partition=record.partition, offset=record.offset)
        self.flights.tracker.track(record.tp, ref.offset)
        return ref

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

    def _record(
        self,
        record: Record,
        parsed: Request | Rejection,
        counted: int,
        wall_time: float,
        out: list[ev.Action],
        answered: frozenset[ev.RequestKey],
    ) -> None:
        ref = self._tracked(record)
        self.stats.records += 1
        if isinstance(parsed, Request):
            parsed = self.screen.unfit(parsed, wall_time) or parsed
        if isinstance(parsed, Rejection):
            self._reject(record, ref, parsed, out)
            return
        request, here = parsed, self.bucket_of_topic[record.topic]
        lane = self.lane_of_topic[record.topic]
        if request.key in answered and not self.flights.is_waiting(request.key):
            self.stats.already_answered += 1  # answered while no dispatcher held it
            self._outcome("already_answered")
            self.flights.tracker.done(record.tp, ref.offset)
            return
        tokens = 0  # a model not served here is answered by admission
        if request.model in self.config.served:
            way = route(
                request, counted, here, self.config.buckets, self.config.served[request.model]
            )
            if isinstance(way, Onward):
                self.stats.forwarded += 1
                self._outcome("forwarded")
                topic = self.topics.requests(way.bucket, lane)
                out.append(ev.Forward(ref, topic, record.key, record.value, record.headers))
                return
            if isinstance(way, ErrorInfo):  # past the largest bucket
                self._refuse(request, ref, here, wall_time, way, 0, out)
                return
            tokens = way.tokens
        problem = self._admission(request, here, wall_time)
        waiting = self.flights.is_waiting(request.key)
        if problem is None and here is not None and not waiting:
            trouble = self._trouble(request, here, lane, wall_time)
            if trouble is not None:
                self._degrade(request, ref, here, wall_time, tokens, *trouble, out)
                return
        if problem is None and here is not None:
            problem = self.quotas.refusal(
                request.tenant, here, tokens, lane, wall_time, request.priority == "sheddable"
            )
        if problem is not None and not waiting:
            self._refuse(request, ref, here, wall_time, problem, tokens, out)
            return
        if here is not None:
            traceparent = valid_traceparent(record.header(TRACEPARENT))
            self._admit(request, ref, here, tokens, wall_time, traceparent, record.value)

    def _refuse(
        self,
        request: Request,
        ref: RecordRef,
        bucket: int | None,
        wall_time: float,
        error: ErrorInfo,
        tokens: int,
        out: list[ev.Action],
    ) -> None:
        self.stats.rejected += 1
        self._outcome(error.code.value)
        out.append(self.refusals.not_admitted(request, ref, bucket, wall_time, error, tokens))

    def _reject(self, record: Record, ref: RecordRef, why: Rejection, out: list[ev.Action]) -> None:
        """A record that is no request: dead-lettered, and answered where it names a reply
        topic and a request id."""
        self.stats.malformed += 1
        self._outcome(why.code.value)
        log.warning("dead letter %s:%d@%d: %s", ref.topic, ref.partition, ref.offset, why.message)
        if why.reply_to is not None and not self.topics.is_reply_topic(why.reply_to):
            why = replace(why, reply_to=None)  # answered only on this pipeline's reply topics
        out.append(self.refusals.malformed(record.value, ref, why))

    def _admit(
        self,
        request: Request,
        ref: RecordRef,
        bucket: int,
        tokens: int,
        wall_time: float,
        traceparent: str | None,
        record: bytes | None = None,
    ) -> None:
        """``record``: the bytes ``request`` was parsed from (its batch may carry them)."""
        if not self.flights.hold(ref, request.key):  # same id again while the first waits
            self.stats.duplicates += 1
            self._outcome("duplicate")
            return
        # its request and ref are taken as they are (instances are not validated again)
        item = BatchItem(request=request, ref=ref, arrived_at=wall_time, traceparent=traceparent)
        lane = self.lane_of_topic[ref.topic]
        self.quotas.admitted(request.tenant, tokens, lane, wall_time)
        # a record without created_at would get another one where it is parsed again
        carried = record if "created_at" in request.model_fields_set else None
        pending = Pending(item, tokens, lane=lane, record=carried)
        if self.coalescer.attach(pending):  # an identical request is computed already
            self._outcome("coalesced")
            return
        self._outcome("accepted")
        for batch in self.batchers[bucket, lane].add(pending, pending.tokens):
            self.flights.queue(bucket, batch)

    def _admission(
        self, request: Request, bucket: int | None, wall_time: float
    ) -> ErrorInfo | None:
        """Model, input, deadline, cancellation, and the bucket's health (its length was
        routed already)."""
        if self._now[0] != wall_time:  # a poll's records share its wall time
            self._now = (wall_time, datetime.fromtimestamp(wall_time, UTC))
        problem = admission_error(request, self._now[1], self._served, 0, tokens=0)
        if problem is not None:
            return problem
        if request.key in self.cancelled:
            return ErrorInfo(code=ErrorCode.cancelled, message="cancelled before it was computed")
        return None

    def _trouble(
        self, request: Request, bucket: int, lane: Lane, wall_time: float
    ) -> tuple[Reason, str] | None:
        """Why the bucket cannot serve the request well (the ladder's triggers), if it
        cannot: no live worker, its breaker open, or queued work past its deadline."""
        state = self.health[bucket].state()
        if state is not Health.ok:
            if self.config.degraded_fallback != "error":
                return None  # "queue": it waits for the bucket to recover
            if state is Health.no_workers:
                return "no_workers", f"bucket {bucket} has no live worker; try again later"
            return "failing", f"bucket {bucket} is failing; try again later"
        if request.deadline is None or lane != "online":
            return None
        left_s = request.deadline.timestamp() - wall_time
        wait_s = self.expected_wait_s(bucket)
        if not late(self.config.ladder, wait_s, left_s):
            return None
        return "late", (
            f"bucket {bucket}'s queued work needs about {wait_s:.1f} s, "
            f"past the request's deadline in {left_s:.1f} s"
        )

    def _degrade(
        self,
        request: Request,
        ref: RecordRef,
        bucket: int,
        wall_time: float,
        tokens: int,
        reason: Reason,
        why: str,
        out: list[ev.Action],
    ) -> None:
        """Down the ladder below the fallback version (``ladder``): the cache (looked up by
        the shell), the model's canned answer, the reject."""
        descent = descend(self.config.ladder, request, reason, why)
        if descent.canned is not None:
            self._outcome("degraded_canned")
            marked = Degraded(rung="canned", reason=reason)
            last = self.refusals.degraded(
                request, ref, bucket, wall_time, tokens, descent.canned, marked
            )
        else:
            if reason != "late":
                self.stats.unavailable += 1
            self.stats.rejected += 1
            self._outcome(descent.error.code.value)
            last = self.refusals.not_admitted(
                request, ref, bucket, wall_time, descent.error, tokens
            )
        out.append(ev.LookUpCache(request, reason, last) if descent.cache else last)

    def deferred(self, ref: RecordRef, out: list[ev.Action]) -> None:
        """A worker holds the request this core meant to answer: it will answer it."""
        held = self.refusals.deferred(ref)
        if held is None:
            return
        if held.bucket is None:
            return  # from the unbucketed topic: the worker holding it answers
        if held.then == "admit":
            # (a record held back this way leaves its trace: rare, and not worth a field)
            self._admit(held.request, ref, held.bucket, held.tokens, held.wall_time, None)
            self._tell_outcomes()
        elif held.pending is not None:
            self.flights.queue(held.bucket, [held.pending])
