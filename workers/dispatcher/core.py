"""The dispatcher's core: every delivery rule, no IO.

It takes events (records read, cancellations, completion notices, heartbeats, outcomes of
its own actions, a tick) and returns actions (batches to send, error replies and dead
letters, records forwarded to their proper bucket, commits, pauses, seeks, reply-topic
scans), the shape of vLLM v1's scheduler. It owns the batchers, the flights, the offsets,
bucket health, admission and routing by its own token counts (``records``, ``routing``),
batches out (``departures``), completions (``completions``) and redelivery (``recovery``).
The shell (``headrace.workers.dispatcher.io.shell``) polls, calls ``handle`` and carries the
actions out; unit tests drive the core with events and an injected clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping

from cachetools import FIFOCache

from headrace.schemas.topics import LANES, Lane
from headrace.transport.base import Partition
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.bulk_share import BulkShare
from headrace.workers.dispatcher.coalescing import Coalescer
from headrace.workers.dispatcher.completions import take_completions
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.deferrals import Deferrals
from headrace.workers.dispatcher.departures import Departures, fair_batcher
from headrace.workers.dispatcher.fair import FairBatcher
from headrace.workers.dispatcher.flights import DispatcherStats, Flights, Pending
from headrace.workers.dispatcher.followers import Followers
from headrace.workers.dispatcher.health import BucketHealth
from headrace.workers.dispatcher.observer import Observer
from headrace.workers.dispatcher.outgoing import Outgoing
from headrace.workers.dispatcher.quotas import Quotas
from headrace.workers.dispatcher.records import RecordsIn
from headrace.workers.dispatcher.recovery import Exhausted, Recovery
from headrace.workers.dispatcher.refusals import Refusals
from headrace.workers.dispatcher.routing import TokenCounter
from headrace.workers.dispatcher.row_caps import row_caps
from headrace.workers.dispatcher.versions import Versions
from headrace.workers.dispatcher.workload import Workload

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
        *,
        count_tokens: TokenCounter,
        reply_topic_exists: Callable[[str], bool] = lambda _: True,
    ) -> None:
        """``count_tokens``: the served model's tokenizer (the core trusts no producer's
        count). ``reply_topic_exists``: whether a request's reply topic exists (the shell's
        ``KnownTopics``: a lookup for a name it has not seen): a request whose reply topic
        does not is refused, so no worker meets it."""
        self.config = config
        self.count_tokens = count_tokens
        self.clock = clock
        self.wall_clock = wall_clock
        self.observer = observer or Observer()
        self.topics = config.topics
        self.bucket_of_topic: dict[str, int | None] = {
            config.topics.requests(b, lane): b for b in config.buckets for lane in LANES
        }
        self.bucket_of_topic[config.topics.ingress] = None  # the unbucketed way in
        self.lane_of_topic: dict[str, Lane] = {
            config.topics.requests(b, lane): lane for b in config.buckets for lane in LANES
        }
        self.lane_of_topic[config.topics.ingress] = "online"
        self.flights = Flights(list(config.buckets))
        self.batchers: dict[tuple[int, Lane], FairBatcher[Pending]] = {
            (b, lane): fair_batcher(config, lane, clock, lambda t: self.quotas.weight(t))
            for b in config.buckets
            for lane in LANES
        }
        self.health = {b: BucketHealth(config.health, clock) for b in config.buckets}
        self.stats = DispatcherStats()
        self.recovery = Recovery(
            config, self.flights, self.health, self.stats, self.observer, clock
        )
        self.workload = Workload(config.buckets, config.scaling_prior_tokens_per_s)
        self.bulk_share = BulkShare(
            config, self.flights, clock, lambda b: bool(len(self.batchers[b, "online"]))
        )
        self.deferrals = Deferrals(clock)
        self.cancelled: FIFOCache[ev.RequestKey, None] = FIFOCache(maxsize=CANCELLED_REMEMBERED)
        self.live: dict[int, frozenset[str]] = {}
        self.slots: Mapping[str, int] = {}  # batches a worker holds at once (absent: 1)
        self.versions = Versions("fallback_version" in config.ladder.rungs)
        self.outgoing = Outgoing(
            config, self.flights, self.versions, self.stats, self.observer, clock, wall_clock
        )
        self.refusals = Refusals()
        self.departures = Departures(
            config,
            self.flights,
            self.batchers,
            self.bulk_share,
            self.outgoing,
            self.refusals,
            self.cancelled,
            self.stats,
            live=lambda: self.live,
            capacity=self._capacity,
        )
        self.coalescer = Coalescer(config.coalesce, clock)
        self.followers = Followers(
            self.coalescer,
            self.flights,
            self.batchers,
            self.bucket_of_topic,
            self.refusals,
            self.cancelled,
            self.stats,
            clock,
            wall_clock,
        )
        self.quotas = Quotas(config.limits, self.drain_s, clock, self._own_online_backlog)
        self.records_in = RecordsIn(
            config,
            self.bucket_of_topic,
            self.lane_of_topic,
            self.flights,
            self.batchers,
            self.health,
            self.cancelled,
            self.refusals,
            self.stats,
            self.observer,
            count_tokens,
            self.quotas,
            self.expected_wait_s,
            reply_topic_exists,
            self.coalescer,
        )
        self._last_commit = clock()
        self._state_logged = clock()
        self._counts_seen = -1  # flights.counts_changed when the in-flight gauge was set
        self._rows_out: dict[int, int] = {}  # during a read: online rows ready or out, by bucket

    # --- the one entry point ---------------------------------------------------------------
    def handle(self, event: ev.Event) -> list[ev.Action]:
        out: list[ev.Action] = []
        match event:
            case ev.RecordsRead():
                try:
                    self.records_in.read(event.records, event.wall_time, out, event.answered)
                finally:
                    self._rows_out.clear()
            case ev.Cancelled():
                for key in event.keys:
                    self.cancelled[key] = None
                    self.followers.drop(key, out)
            case ev.CompletionsRead():
                take_completions(
                    event.completions,
                    self.flights,
                    self.health,
                    self.workload,
                    self.deferrals,
                    self.quotas,
                )
            case ev.WorkersSeen():
                self._workers_seen(event, out)
            case ev.StateUnavailable():
                self.recovery.state_failed(event.reason)
            case ev.StateLost():
                self.recovery.state_lost(out)
            case ev.AnswerDeferred():
                self.records_in.deferred(event.ref, out)
            case ev.AnswersDelivered():
                for ref in event.refs:
                    self.refusals.delivered(ref)
                    self.flights.finish(ref)
            case ev.BatchNotSent():
                self._not_sent(event.batch_id, out)
            case ev.HandedOff():
                if (flight := self.flights.get(event.batch_id)) is not None:
                    flight.runner = event.worker_id
            case ev.Settled():
                self._exhaust(self.recovery.settled(event), out)
            case ev.PartitionsRevoked():
                out.append(self._commit(sync=True, only=set(event.partitions)))
                self._forget(list(event.partitions))
            case ev.PartitionsLost():  # a new reader: everything the old one held is gone
                self._forget(self.flights.tracker.partitions())
                self.departures.paused.clear()
            case ev.LimitsSynced():
                self.quotas.synced_with(event.usage, event.overrides)
            case ev.LimitsNotSynced():
                self.quotas.not_synced(event.deltas)
            case ev.BacklogSeen():
                self.quotas.backlog_seen(event.backlog)
            case ev.TrafficSeen():
                self.versions.seen_policy(event.stable, event.policy, event.revision)
            case ev.TenantKeysRead():
                self.records_in.screen.tenant_keys = event.keys
            case ev.NotShared():
                self.followers.not_shared(event.refs)
            case ev.Tick():
                self._tick(out)
        if self.followers.active:
            self.followers.after(out)
        if self._counts_seen != self.flights.counts_changed:  # the gauge, when it moved
            self._counts_seen = self.flights.counts_changed
            self.observer.in_flight(self.flights.counts())
        return [a for a in out if not (isinstance(a, ev.Commit) and not a.offsets)]

    # --- what the shell asks -----------------------------------------------------------------
    def in_flight_batch_ids(self) -> list[str]:
        return list(self.flights.in_flight())

    def topic_busy(self, topic: str) -> bool:
        """Records of ``topic`` are batched, in flight or held back: not reading is meant."""
        if topic not in self.bucket_of_topic:
            return True
        bucket = self.bucket_of_topic[topic]
        if bucket is None:
            return False  # the unbucketed topic: what is read is forwarded at once
        lane = self.lane_of_topic[topic]
        return bool(
            (bucket, lane) in self.departures.paused
            or self.flights.in_flight_count(bucket, lane)
            or self.flights.ready_count(bucket, lane)
            or len(self.batchers[bucket, lane])
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
        wait = self.departures.seconds_until_due()
        if wait is not None:
            return max(1, min(ceiling, int(wait * 1000)))
        return ceiling

    def final_commit(self) -> ev.Commit:
        return self._commit(sync=True)

    def queued_work_s(self, bucket: int, backlog: int) -> float:
        """The autoscaling signal: seconds one worker needs for ``backlog`` requests of
        ``bucket`` at what its requests cost recently (``workload``)."""
        return self.workload.queued_seconds(bucket, backlog)

    def expected_wait_s(self, bucket: int) -> float | None:
        """What the bucket's backlog (over every dispatcher) needs of its live workers (each
        batch they hold at once computing in parallel), once its requests' cost has been seen
        (None before: the ladder's late trigger waits)."""
        backlog = self.quotas.backlog.get(bucket)
        if backlog is None or not self.workload.seen(bucket):
            return None
        return self.queued_work_s(bucket, backlog) / max(1, self._capacity(bucket))

    def _own_online_backlog(self, bucket: int) -> int:
        """Online requests of ``bucket`` read here and not yet answered. Asked for each record
        read; the rows in batches ready or out stay as they are while a poll's records are
        read (no batch leaves, none completes), so they are counted once a poll: a walk over
        every batch in flight for each record cost a few microseconds of each."""
        out = self._rows_out.get(bucket)
        if out is None:
            out = self._rows_out[bucket] = self.flights.unanswered_rows(bucket, "online")
        return len(self.batchers[bucket, "online"]) + out

    def drain_s(self, bucket: int) -> float:
        """Seconds the bucket's live workers need per request (the backlog's drain rate)."""
        return self.queued_work_s(bucket, 1) / max(1, len(self.live.get(bucket, ())))

    def committed_offset(self, partition: Partition) -> int | None:
        return self.flights.tracker.committed(partition)

    def unanswered(self, partition: Partition) -> int:
        """Records of ``partition`` read and not yet answered."""
        return self.flights.tracker.pending_in(partition)

    def expected_offset(self, partition: Partition) -> int | None:
        return self.flights.tracker.expected(partition)

    def describe(self) -> str:
        f = self.flights
        return (
            f"unanswered {f.waiting_count()} (tracked offsets {f.tracker.pending_count()}): "
            f"open {sum(len(b) for b in self.batchers.values())}, ready {f.total_ready()} "
            f"batches, in flight {f.in_flight_total()} batches ({f.counts()}), "
            f"paused buckets {sorted(self.departures.paused)}, "
            f"settling {self.recovery.settling} scans, "
            f"{len(self.coalescer)} waiting on an identical request"
        )

    # --- batches out ---------------------------------------------------------------------------
    def _tick(self, out: list[ev.Action]) -> None:
        self._exhaust(self.recovery.check_leases(self.live), out)
        self._release_held()
        self.followers.sweep(out)
        self.departures.flush_due(out)
        if self.quotas.due():
            out.append(ev.SyncLimits(*self.quotas.take_unsynced()))
        self._log_state()
        if (self.clock() - self._last_commit) * 1000 >= self.config.commit_interval_ms:
            out.append(self._commit(sync=False))

    def _capacity(self, bucket: int) -> int:
        """Batches the bucket's live workers take at once."""
        return sum(self.slots.get(w, 1) for w in self.live.get(bucket, ()))

    def _not_sent(self, batch_id: str, out: list[ev.Action]) -> None:
        """The queue refused the batch (Redis away): first in line again once it is back."""
        flight = self.flights.take(batch_id)
        if flight is None:
            return
        self.flights.queue(flight.bucket, list(flight.pending.values()), front=True)
        self.departures.set_paused(flight.bucket, flight.lane, True, out)
        self.recovery.state_failed("the batch queue refused a batch")

    def _release_held(self) -> None:
        for bucket, pending in self.deferrals.due():  # batched again with what else waits
            if self.flights.alive([pending]):
                for batch in self.batchers[bucket, pending.lane].add(pending, pending.tokens):
                    self.flights.queue(bucket, batch)

    # --- recovery's outcomes -------------------------------------------------------------------
    def _workers_seen(self, event: ev.WorkersSeen, out: list[ev.Action]) -> None:
        self.recovery.state_ok()
        self.live = {b: frozenset(event.live.get(b, ())) for b in self.config.buckets}
        self.versions.seen_workers(self.live, event.versions)
        self.slots = event.slots
        for bucket, cap in row_caps(self.live, event.plans).items():
            for lane in LANES:
                self.batchers[bucket, lane].max_rows = cap
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

        held = self.deferrals.forget(set(partitions))
        self.flights.forget(
            partitions, lambda gone: drain(gone) + held + self.coalescer.forget(gone)
        )

    def _log_state(self) -> None:
        """Every STATE_LOG_INTERVAL_S while anything is unanswered: what it waits on."""
        now = self.clock()
        if now - self._state_logged < STATE_LOG_INTERVAL_S or not self.flights.waiting_count():
            return
        self._state_logged = now
        log.info(self.describe())
