"""The dispatcher process: a short loop around the core.

Each pass polls the bucket topics, the control topic, the completion notices and (once a
second) the heartbeats, hands each to the core as an event, and carries out the actions the
core returns: batches to the Celery queues, error replies and dead letters, commits, pauses,
seeks. Reply-topic scans run on a thread of their own (``settling``) and come back as
events. Nothing here decides anything about delivery: that is the core's.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable

from headrace.config.settings import Settings
from headrace.connections import REDIS_ERRORS, redis_client
from headrace.health.endpoint import saw
from headrace.health.ready import announce_ready
from headrace.limits.store import LimitsStore
from headrace.models.registry import served_models
from headrace.models.tokenizer import token_counter
from headrace.schemas.messages import Batch
from headrace.schemas.signing import KeyFolder
from headrace.transport import Partition, Transport, open_transport
from headrace.transport.known_topics import KnownTopics
from headrace.workers.collector import tune_collector
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.core import DispatcherCore
from headrace.workers.dispatcher.events import (
    Action,
    Answer,
    AnswerDeferred,
    AnswersDelivered,
    BatchNotSent,
    Cancelled,
    Commit,
    CompletionsRead,
    Event,
    Forward,
    HandedOff,
    LimitsNotSynced,
    LimitsSynced,
    LookUpCache,
    NotShared,
    PartitionsLost,
    PartitionsRevoked,
    RecordsRead,
    Seek,
    SendBatch,
    SetPaused,
    Settle,
    Share,
    StateLost,
    StateUnavailable,
    SyncLimits,
    TenantKeysRead,
    Tick,
)
from headrace.workers.dispatcher.io.answers import Answerer
from headrace.workers.dispatcher.io.cache_rung import CacheRung
from headrace.workers.dispatcher.io.control import ControlReader
from headrace.workers.dispatcher.io.lag import export_lag, publish_backlog
from headrace.workers.dispatcher.io.loop_watch import LoopWatch, LoopWatcher
from headrace.workers.dispatcher.io.metrics import HANDED_OFF, PrometheusObserver
from headrace.workers.dispatcher.io.model_watch import ModelWatch
from headrace.workers.dispatcher.io.settling import Settler
from headrace.workers.dispatcher.io.stall import stall_on
from headrace.workers.dispatcher.io.takeover import answered_before
from headrace.workers.dispatcher.io.workers_seen import WorkersWatch
from headrace.workers.handoff import HandOff
from headrace.workers.ledger import Ledger, RedisLedger
from headrace.workers.tasks import batch_sender

log = logging.getLogger(__name__)

HOUSEKEEPING_INTERVAL_S = 1.0  # heartbeats, dead runners, Redis epoch
CONTROL_INTERVAL_S = 0.05

BatchSender = Callable[[Batch, str], None]  # (batch, queue)


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        dispatcher_id: str | None = None,
        *,
        transport: Transport | None = None,
        ledger: Ledger | None = None,
        send_batch: BatchSender | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Builds the core; ``open`` (called by ``run``) connects to the services."""
        self.settings = settings
        self.clock = clock
        config = CoreConfig.from_settings(settings, served_models(settings), dispatcher_id)
        self.core = DispatcherCore(
            config,
            clock,
            observer=PrometheusObserver(),
            count_tokens=token_counter(settings),
            # set up in open(): no record is read before
            reply_topic_exists=lambda topic: self.reply_topics.exists(topic),
        )
        self.dispatcher_id = config.dispatcher_id
        self._transport = transport
        self._ledger = ledger
        self._send_batch = send_batch
        self.report_requested = threading.Event()  # set by SIGUSR2 (the CLI)
        self._announced = False
        self._epoch: str | None = None
        self._housekept = -1e9
        self._assigned_ms: dict[Partition, int] = {}  # when this dispatcher got each partition
        self._paused_topics: set[str] = set()  # what the core paused, for partitions to come
        self._control_read = -1e9

    # --- lifecycle --------------------------------------------------------------------------
    def open(self) -> Dispatcher:
        s = self.settings
        self.transport = self._transport or open_transport(s)
        topics = list(self.core.bucket_of_topic)
        self.transport.ensure_topics([*topics, self.core.topics.dead_letter])
        self.ledger = self._ledger or RedisLedger(redis_client(s), s.topic_prefix, s.answered_ttl_s)
        self.workers = WorkersWatch(self.ledger, s.buckets, s.worker_heartbeat_s)
        self.send_batch = self._send_batch or batch_sender(s, lambda: self.workers.framed)
        # straight to an idle worker first (not with a sender of the caller's: its tests')
        self.handoff = (
            HandOff(redis_client(s), s.topic_prefix)
            if s.handoff and self._send_batch is None
            else None
        )
        self.limits = LimitsStore(redis_client(s), s.topic_prefix, s.quota_window_s)
        # short: a flush that fails is tried again on the next pass, and the poll loop must
        # keep its group membership meanwhile
        self.reply_topics = KnownTopics(self.transport.list_topics, time.monotonic)
        self.answers = Answerer(
            self.transport.writer(delivery_timeout_s=3.0),
            self.ledger,
            self.core.topics,
            owner=f"dispatcher-{self.dispatcher_id}",
            topic_exists=self.reply_topics.exists,
        )
        self.settler = Settler(self.transport, self.ledger)
        self.cache_rung = CacheRung(s, lambda: self.core.versions.policy)
        self.model_watch = ModelWatch(s, redis_client(s), self.dispatcher_id)
        first = self.model_watch.read()  # before any record: every batch has its version
        if first is not None:
            self.handle(first)
        self.control = ControlReader(self.transport, s)
        self.key_folder = KeyFolder(s.tenant_keys_dir)  # read again when it changes
        self.reader = self.transport.reader(
            f"{s.topic_prefix}.dispatcher",
            max_poll_records=500,
            busy=lambda partition: self.core.topic_busy(partition[0]),
        )
        self.reader.subscribe(topics, self)
        return self

    def run(self, stop: threading.Event | None = None) -> None:
        stop = stop or threading.Event()
        self.open()
        tune_collector()  # after opening: what the process holds from now on is not walked
        log.info(
            "dispatcher %s consuming %d bucket topics", self.dispatcher_id, len(self.core.batchers)
        )
        watch = LoopWatch(time.monotonic, exit_s=self.settings.dispatcher_stall_exit_s)
        watcher = LoopWatcher(watch, threading.current_thread(), self.reader.wakeup).start()
        try:
            while not stop.is_set():
                self.step()
                watch.beat()
                saw("loop", True)  # /readyz: a loop that stops turning is not ready
        finally:
            watcher.stop()
            self.close()

    def close(self) -> None:
        try:
            self._carry_out([self.core.final_commit()])
            self.control.close()
            self._guarded(
                lambda: self.limits.withdraw_backlog(self.dispatcher_id, self.core.config.buckets)
            )
        finally:
            self.settler.close()
            self.cache_rung.close()
            self.reader.close()
            self.answers.writer.close()

    # --- one pass ---------------------------------------------------------------------------
    def step(self) -> None:
        awaited, flood = self.core.awaiting()
        self.reader.expect(awaited=awaited, flood=flood)
        answering = self.answers.pending or self.cache_rung.pending
        polled = self.reader.poll(self.core.poll_timeout_ms(answering))
        if polled and self.settings.fault_dispatcher_stall_marker is not None:
            stall_on(self.settings.fault_dispatcher_stall_marker, polled)
        if polled:
            answered = answered_before(polled, self._assigned_ms, self.ledger)
            self.handle(RecordsRead(polled, time.time(), answered))
            # a batch due now (an idle worker) goes at once rather than at the pass's end:
            # the rest of a pass (control, completions, heartbeats) took 2 ms of a lone
            # request's latency
            self.handle(Tick())
        self._guarded(self._read_control)
        self._guarded(self._read_completions)
        self._guarded(self._housekeeping)
        for settled in self.settler.results():
            self.handle(settled)
        for found in self.cache_rung.results():
            if isinstance(found, NotShared):
                self.handle(found)
                continue
            for follow in self._carry_out([found]):
                self.handle(follow)
        if self.report_requested.is_set():
            self.report_requested.clear()
            self.log_state()
        self.handle(Tick())
        delivered = self.answers.deliver()
        if delivered:
            self.handle(AnswersDelivered(delivered))

    def handle(self, event: Event) -> None:
        """Give ``event`` to the core and carry out its actions, and the actions of the
        events those give rise to."""
        events: deque[Event] = deque([event])
        while events:
            events.extend(self._carry_out(self.core.handle(events.popleft())))

    def _carry_out(self, actions: list[Action]) -> list[Event]:
        follow: list[Event] = []
        unsent: list[str] = []
        self.answers.expect(actions)
        for action in actions:
            match action:
                case SendBatch() if unsent:
                    unsent.append(action.batch.batch_id)
                case SendBatch():
                    self.model_watch.sent(action)
                    try:
                        worker = self._hand_off(action)
                        if worker is None:
                            self.send_batch(action.batch, action.queue)
                        else:
                            follow.append(HandedOff(action.batch.batch_id, worker))
                    except REDIS_ERRORS as exc:
                        log.warning("batch queue unreachable (%s)", exc)
                        unsent.append(action.batch.batch_id)
                case Answer():
                    if not self.answers.answer(action):
                        follow.append(AnswerDeferred(action.ref))
                case Forward():
                    self.answers.forward(action)
                case Commit():
                    try:
                        self.reader.commit(action.offsets, sync=action.sync)
                    except Exception:  # the next commit carries these offsets too
                        log.warning("offset commit failed", exc_info=True)
                case Seek():
                    self.reader.seek(action.partition, action.offset)
                case SetPaused():
                    self._set_paused(action.topic, action.paused)
                case Settle():
                    self.settler.submit(action)
                case LookUpCache():
                    self.cache_rung.submit(action)
                case Share():
                    self.cache_rung.share(action)
                case SyncLimits():
                    follow.append(self._sync_limits(action))
        # first in line again in their order: the last one goes to the front first
        follow += [BatchNotSent(batch_id) for batch_id in reversed(unsent)]
        return follow

    def _hand_off(self, action: SendBatch) -> str | None:
        """The idle worker an online batch went to straight, if one was idle (only while its
        bucket had a free place: a batch sent into a full bucket waits behind those Celery
        holds, in their order)."""
        if self.handoff is None or not action.handoff:
            return None
        worker = self.handoff.offer(action.batch, action.queue)
        if worker is not None:
            HANDED_OFF.labels(str(action.batch.bucket)).inc()
        return worker

    def _sync_limits(self, action: SyncLimits) -> Event:
        try:
            usage = self.limits.sync(action.deltas, action.tenants, time.time())
            return LimitsSynced(usage, self.limits.overrides())
        except REDIS_ERRORS as exc:
            log.debug("tenant limits not synced: %s", exc)
            return LimitsNotSynced(action.deltas)

    def _set_paused(self, topic: str, paused: bool) -> None:
        """Pause or resume ``topic``'s partitions now, and those the group assigns later."""
        if paused:
            self._paused_topics.add(topic)
        else:
            self._paused_topics.discard(topic)
        partitions = [p for p in self.reader.assignment() if p[0] == topic]
        if paused:
            self.reader.pause(partitions)
        else:
            self.reader.resume(partitions)

    def _guarded(self, step: Callable[[], None]) -> None:
        """A step that needs Redis; if Redis is away the core hears of it and polling goes
        on (Kafka holds the requests; nothing is committed past what was answered)."""
        try:
            step()
        except REDIS_ERRORS as exc:
            saw("redis", False, repr(exc))
            self.handle(StateUnavailable(repr(exc)))

    def _read_control(self) -> None:
        now = self.clock()
        if now - self._control_read < CONTROL_INTERVAL_S:
            return
        self._control_read = now
        controls = self.control.poll(self.core.records_in.screen.tenant_keys)
        keys = [(c.tenant, c.request_id) for c in controls]
        for key in keys:
            self.ledger.cancel(*key)
        if keys:
            self.handle(Cancelled(keys))
            self.control.commit()

    def _read_completions(self) -> None:
        completions = self.ledger.take_completions(self.dispatcher_id)
        if completions:
            self.handle(CompletionsRead(completions))

    def _housekeeping(self) -> None:
        """Once a second: the Redis epoch (did it lose its data?), worker heartbeats, and
        which worker runs each batch in flight."""
        now = self.clock()
        if now - self._housekept < min(HOUSEKEEPING_INTERVAL_S, self.settings.worker_heartbeat_s):
            return
        self._housekept = now
        epoch = self.ledger.epoch(uuid.uuid4().hex)
        saw("redis", True)  # /readyz
        if self._epoch is not None and epoch != self._epoch:
            self.handle(StateLost())
        self._epoch = epoch
        self.handle(self.workers.read(self.core.in_flight_batch_ids()))
        for seen in self.model_watch.tick():
            self.handle(seen)
        if self.key_folder.refresh():
            log.info("tenant keys read again: %d tenants sign", len(self.key_folder.keys))
            self.handle(TenantKeysRead(self.key_folder.keys))
        backlog = export_lag(self.reader, self.core)
        self.handle(publish_backlog(self.limits, self.dispatcher_id, self.core, backlog))

    def log_state(self) -> None:
        """Every partition's position and client state, then what the core holds."""
        for partition, state in sorted(self.reader.diagnose().items()):
            log.info(
                "partition %s:%d expected %s; %s",
                *partition,
                self.core.expected_offset(partition),
                state,
            )
        log.info(self.core.describe())

    # --- the reader's group (this is its Rebalance listener) --------------------------------
    def assigned(self, partitions: list[Partition]) -> None:
        now_ms = int(time.time() * 1000)
        for partition in partitions:
            self._assigned_ms.setdefault(partition, now_ms)
        # they come unpaused; the core paused their topics (maybe during the rebalance)
        held = [p for p in partitions if p[0] in self._paused_topics]
        if held:
            self.reader.pause(held)
        if partitions and not self._announced:
            self._announced = True
            announce_ready("dispatcher", self.dispatcher_id)

    def revoked(self, partitions: list[Partition]) -> None:
        for partition in partitions:
            self._assigned_ms.pop(partition, None)
        self.handle(PartitionsRevoked(partitions))

    def lost(self, partitions: list[Partition]) -> None:
        for partition in partitions:
            self._assigned_ms.pop(partition, None)
        self._paused_topics.clear()  # a new consumer; the core forgets its pauses too
        self.handle(PartitionsLost(partitions))
