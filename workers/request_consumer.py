"""The dispatcher's consumer of the bucket topics, and what keeps it reading.

- How long its fetches wait at the broker (``runtime.fetch_wait``).
- A rebalance in progress counts as "no partitions"; a consumer left without partitions for
  REJOIN_AFTER_S is replaced by a fresh one, which joins the group again (seen after tansu
  lost its S3 store for a while: the group forgot the member and the member never rejoined;
  and a consumer that sat over 40 s with its partitions revoked, pending revocation, its
  rejoin never finishing).
- A partition whose fetch stalled with records past its position is sought again, then the
  consumer is replaced (``runtime.fetch_watch``).
- Pausing a bucket's partitions (backpressure) and resuming them with the kafka-python fix
  (``runtime.kafka_fixes.resume``).

What to commit, what to forget and when a bucket is busy are the dispatcher's: it is this
consumer's ``owner``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError
from kafka.structs import TopicPartition

from headrace.config.settings import Settings
from headrace.transport.kafka import clients as kafka_clients
from headrace.transport.kafka import fixes as kafka_fixes
from headrace.transport.kafka.diagnostics import partition_state
from headrace.transport.kafka.fetch_wait import FetchWait
from headrace.transport.kafka.fetch_watch import FetchWatch, Remedy
from headrace.workers.offsets import Partition

log = logging.getLogger(__name__)

REJOIN_AFTER_S = 20.0
FETCH_STALL_S = 10.0  # records past the position, none returned: seek, then a new consumer
CHECK_INTERVAL_S = 1.0


class ConsumerOwner(Protocol):
    def topic_busy(self, topic: str) -> bool:
        """Records of ``topic`` are batched, in flight or held back: not reading is meant."""
        ...

    def partitions_revoked(self, partitions: list[Partition]) -> None: ...

    def partitions_assigned(self, partitions: list[TopicPartition]) -> None: ...

    def consumer_replaced(self) -> None:
        """The old consumer's partitions and pauses are gone with it."""
        ...


class RequestConsumer:
    def __init__(
        self,
        settings: Settings,
        group_id: str,
        topics: list[str],
        owner: ConsumerOwner,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.topics = topics
        self.owner = owner
        self.clock = clock
        self.rebalancing = False  # partitions revoked, the new assignment not come yet
        self.fetch_wait = FetchWait(settings, clock=clock)
        self.fetch_watch = FetchWatch(FETCH_STALL_S, clock)
        self._read_records = False  # the last poll returned records
        self._checked = clock()
        self._unassigned_since: float | None = clock()
        self.consumer = self._new_consumer()

    def _new_consumer(self) -> KafkaConsumer:
        consumer = kafka_clients.consumer(
            self.settings, group_id=self.group_id, max_poll_records=500
        )
        consumer.subscribe(self.topics, listener=_Rebalance(self))
        return consumer

    def poll(
        self, timeout_ms: int, *, awaited: bool, flood: bool
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """``awaited``: a record is expected soon; ``flood``: many are (see FetchWait)."""
        self.fetch_wait.apply(self.consumer, awaited=awaited or self._read_records, flood=flood)
        polled: dict[TopicPartition, list[ConsumerRecord]] = self.consumer.poll(
            timeout_ms=timeout_ms
        )
        self._read_records = bool(polled)
        return polled

    def set_paused(self, topic: str, pause: bool) -> None:
        parts = [tp for tp in self.consumer.assignment() if tp.topic == topic]
        if pause:
            self.consumer.pause(*parts)
        else:
            kafka_fixes.resume(self.consumer, *parts)

    def check(self) -> None:
        """Once a second: replace a consumer without partitions for REJOIN_AFTER_S; watch
        the fetches of one that has them."""
        now = self.clock()
        if now - self._checked < CHECK_INTERVAL_S:
            return
        self._checked = now
        assignment = set() if self.rebalancing else self.consumer.assignment()
        if assignment:
            self._unassigned_since = None
            self._watch_fetches(assignment)
            return
        if self._unassigned_since is None:
            self._unassigned_since = now
            return
        if now - self._unassigned_since < REJOIN_AFTER_S:
            return
        self.renew(f"no partitions for {now - self._unassigned_since:.0f}s")

    def _watch_fetches(self, assignment: set[TopicPartition]) -> None:
        """Only an idle bucket counts: one with batches in flight or waiting, or paused by
        backpressure, is not meant to read (a flood once tripped the watch: its bucket was
        paused and resumed between the checks)."""
        paused = set(self.consumer.paused())
        for tp in assignment:
            busy = tp in paused or self.owner.topic_busy(tp.topic)
            try:
                position = self.consumer.position(tp, timeout_ms=0) if not busy else None
            except KafkaError:  # revoked meanwhile, or no position yet
                continue
            remedy = self.fetch_watch.observe(tp, position, self.consumer.highwater(tp), busy)
            if remedy is Remedy.seek:
                log.warning(
                    "%s:%d: no records for %.0fs at offset %s though the log ends at %s; "
                    "seeking there again; client state: %s",
                    tp.topic,
                    tp.partition,
                    self.fetch_watch.stall_s,
                    position,
                    self.consumer.highwater(tp),
                    self.report(tp),
                )
                assert position is not None
                self.consumer.seek(tp, position)
            elif remedy is Remedy.renew:
                self.renew(f"{tp.topic}:{tp.partition} stalled at offset {position}")
                return

    def renew(self, why: str) -> None:
        log.warning("%s; replacing the consumer (it joins the group again)", why)
        self.owner.consumer_replaced()
        try:
            self.consumer.close(autocommit=False)
        except Exception:
            log.warning("closing the stuck consumer failed", exc_info=True)
        self.rebalancing = False
        self.fetch_watch.forget()
        self.fetch_wait.new_consumer()
        self.consumer = self._new_consumer()
        self._unassigned_since = self.clock()

    def log_partitions(self, expected: Callable[[Partition], int | None]) -> None:
        """Per assigned partition: fetch position, last known high watermark, paused or not,
        the next offset the owner expects, and kafka-python's own state of it."""
        paused = set(self.consumer.paused())
        for tp in sorted(self.consumer.assignment()):
            log.info(
                "partition %s:%d position %s highwater %s expected %s%s; client state: %s",
                tp.topic,
                tp.partition,
                self.consumer.position(tp, timeout_ms=1000),
                self.consumer.highwater(tp),
                expected((tp.topic, tp.partition)),
                " paused" if tp in paused else "",
                self.report(tp),
            )

    def report(self, tp: TopicPartition) -> dict[str, Any]:
        return {**(partition_state(self.consumer, tp) or {}), "rebalancing": self.rebalancing}


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, requests: RequestConsumer) -> None:
        self.requests = requests

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        self.requests.owner.partitions_revoked([(tp.topic, tp.partition) for tp in revoked])
        self.requests.rebalancing = True

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("assigned %d partitions", len(assigned))
        self.requests.rebalancing = False
        self.requests.owner.partitions_assigned(assigned)
