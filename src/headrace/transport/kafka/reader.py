"""``Reader`` on kafka-python's ``KafkaConsumer``.

For every broker: records come back as ``Record``s, commits take plain offsets, a resumed
partition's parked records are let back (``fixes.resume``), and a partition the group
assigns starts at the committed offset, not paused, even one this member held before the
rebalance (``fixes.start_afresh``).

For tansu (``broker_flavor = "tansu"``), three more things, which Apache Kafka does not need:

- **fetch waits** follow the owner's hints (``expect``): tansu answers a parked fetch only
  when its wait runs out, so the wait is the latency a record sees (``fetch_wait``);
- **stalled fetches**: a partition with records past its position whose fetch returns
  nothing for ``stall_s`` is sought again, then the consumer is replaced (``fetch_watch``);
  partitions the owner calls busy are not watched. The seek also puts a floor under the
  fetch wait (``FetchWait.slow_reads``): after a tansu restart on S3 storage, fetches that
  may wait 2 ms came back empty, "high watermark 1004, no records", every time, while one
  that may wait 100 ms got its record in 12-20 ms (every reply to a client took 11 s: the
  seek's 5 s, then the replacement's). A reader that assigns its partitions (reply
  listeners, job runners) watches with ``ASSIGNED_STALL_S``: it has a caller waiting;
- **a group that never hands partitions back**: a member without partitions (a rebalance in
  progress counts) for ``REJOIN_AFTER_S`` is replaced, and joins again (seen after tansu lost
  its S3 store: the group forgot the member, or left its partitions pending revocation).
  With Apache Kafka an idle member of a group with more members than partitions is normal,
  so this stays off there.

A replaced consumer tells the owner (``Rebalance.lost``) and starts where the old one stood:
a group member at the committed offsets, an assigned reader at the old positions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka import ConsumerRebalanceListener, KafkaConsumer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from headrace.config.settings import Settings
from headrace.transport.base import Partition, Rebalance, Record, Reset, Start
from headrace.transport.kafka import fixes
from headrace.transport.kafka.clients import consumer_options
from headrace.transport.kafka.diagnostics import partition_state
from headrace.transport.kafka.fetch_wait import FetchWait
from headrace.transport.kafka.fetch_watch import FetchWatch, Remedy

log = logging.getLogger(__name__)

REJOIN_AFTER_S = 20.0
CHECK_INTERVAL_S = 1.0
DEFAULT_STALL_S = 5.0  # records past the position, none returned: seek, then renew
ASSIGNED_STALL_S = 2.0  # the same on a reader that assigns its partitions (a caller waits)
# The stall check asks the broker for log ends once a second on the owner's thread; with the
# broker unwell (its store away) an unbounded ask blocked the dispatcher's loop for ~27 s.
END_OFFSETS_TIMEOUT_MS = 300
ENDS_BACKOFF_S = 10.0  # after an ask that failed, judge by the fetches' high watermarks


class KafkaReader:
    def __init__(
        self,
        settings: Settings,
        group_id: str | None,
        *,
        reset: Reset = "beginning",
        max_poll_records: int = 500,
        busy: Callable[[Partition], bool] | None = None,
        stall_s: float | None = None,  # None: DEFAULT_STALL_S, or ASSIGNED_STALL_S
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.reset = reset
        self.tansu = settings.broker_flavor == "tansu"
        self.max_poll_records = max_poll_records
        self.busy = busy or (lambda _: False)
        self.clock = clock
        self.fetch_wait = FetchWait(settings, clock=clock)
        self._stall_s = stall_s
        self.fetch_watch = FetchWatch(stall_s or DEFAULT_STALL_S, clock)
        self.renewals = 0
        self._listener: Rebalance | None = None
        self._topics: list[str] = []
        self._assigned: list[TopicPartition] = []  # assign mode
        self._start: Start = "committed"
        self._rebalancing = False  # revoked, the new assignment not come yet
        self._paused: set[Partition] = set()  # by the owner: not meant to be read now
        self._read_records = False
        self._ends_again_at = 0.0  # when the stall check may ask the broker for log ends
        self._checked = clock()
        self._unassigned_since: float | None = None
        self._consumer = self._new_consumer()

    def _new_consumer(self) -> KafkaConsumer:
        consumer = KafkaConsumer(
            **consumer_options(
                self.settings,
                group_id=self.group_id,
                max_poll_records=self.max_poll_records,
                auto_offset_reset="earliest" if self.reset == "beginning" else "latest",
            )
        )
        fixes.known_coordinator_fast(consumer)
        return consumer

    # --- what to read ----------------------------------------------------------------------
    def subscribe(self, topics: Sequence[str], listener: Rebalance) -> None:
        self._topics, self._listener = list(topics), listener
        self._unassigned_since = self.clock()
        self._consumer.subscribe(self._topics, listener=_Listener(self))

    def assign(self, topics: Sequence[str], start: Start = "committed") -> list[Partition]:
        self._assigned = [
            TopicPartition(topic, p)
            for topic in topics
            for p in sorted(self._consumer.partitions_for_topic(topic) or {0})
        ]
        self._start = start
        self.fetch_watch = FetchWatch(self._stall_s or ASSIGNED_STALL_S, self.clock)
        self._consumer.assign(self._assigned)
        self._seek_start(self._assigned)
        return [(tp.topic, tp.partition) for tp in self._assigned]

    def _seek_start(self, tps: list[TopicPartition]) -> None:
        if not tps:  # kafka-python's seek_to_* without partitions means every partition
            return
        if self._start == "beginning":
            self._consumer.seek_to_beginning(*tps)
        elif self._start == "end":
            self._consumer.seek_to_end(*tps)
            for tp in tps:  # resolve the end now: what is produced after this is read
                self._consumer.position(tp)

    # --- reading ---------------------------------------------------------------------------
    def expect(self, *, awaited: bool, flood: bool = False) -> None:
        if self.tansu:
            self.fetch_wait.apply(
                self._consumer, awaited=awaited or self._read_records, flood=flood
            )

    def poll(self, timeout_ms: int) -> dict[Partition, list[Record]]:
        if self.tansu:
            self._check()
        polled = self._consumer.poll(timeout_ms=timeout_ms)
        self._read_records = bool(polled)
        return {
            (tp.topic, tp.partition): [
                Record(
                    r.topic,
                    r.partition,
                    r.offset,
                    r.key,
                    r.value or b"",
                    tuple((k, v or b"") for k, v in r.headers or ()),
                    r.timestamp if r.timestamp is not None and r.timestamp >= 0 else None,
                )
                for r in records
            ]
            for tp, records in polled.items()
        }

    def wakeup(self) -> None:
        client = getattr(self._consumer, "_client", None)
        if client is not None and hasattr(client, "wakeup"):
            client.wakeup()

    def pause(self, partitions: Sequence[Partition]) -> None:
        self._paused.update(partitions)
        self._consumer.pause(*[TopicPartition(*p) for p in partitions])

    def resume(self, partitions: Sequence[Partition]) -> None:
        self._paused.difference_update(partitions)
        fixes.resume(self._consumer, *[TopicPartition(*p) for p in partitions])

    def seek(self, partition: Partition, offset: int) -> None:
        self._consumer.seek(TopicPartition(*partition), offset)

    def position(self, partition: Partition) -> int | None:
        try:
            return int(self._consumer.position(TopicPartition(*partition), timeout_ms=1000))
        except KafkaError:
            return None

    def highwater(self, partition: Partition) -> int | None:
        return self._consumer.highwater(TopicPartition(*partition))  # type: ignore[no-any-return]

    def assignment(self) -> set[Partition]:
        if self._rebalancing:
            return set()
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def commit(self, offsets: Mapping[Partition, int], *, sync: bool = True) -> None:
        if not offsets:
            return
        meta = {TopicPartition(*p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        if sync:
            self._consumer.commit(meta)
        else:
            self._consumer.commit_async(meta, callback=_log_commit_error)

    def diagnose(self) -> dict[Partition, dict[str, Any]]:
        out: dict[Partition, dict[str, Any]] = {}
        paused = set(self._consumer.paused())
        for tp in sorted(self._consumer.assignment()):
            out[(tp.topic, tp.partition)] = {
                "position": self.position((tp.topic, tp.partition)),
                "highwater": self._consumer.highwater(tp),
                "paused": tp in paused,
                "rebalancing": self._rebalancing,
                "client": partition_state(self._consumer, tp),
            }
        return out

    def close(self) -> None:
        self._consumer.close(autocommit=False)

    # --- tansu: stalled fetches and lost groups ----------------------------------------
    def _check(self) -> None:
        now = self.clock()
        if now - self._checked < CHECK_INTERVAL_S:
            return
        self._checked = now
        assignment = self.assignment()
        if assignment or self._listener is None:
            self._unassigned_since = None
            self._watch(assignment)
            return
        if self._unassigned_since is None:
            self._unassigned_since = now
        elif now - self._unassigned_since >= REJOIN_AFTER_S:
            self.renew(f"no partitions for {now - self._unassigned_since:.0f}s")

    def _watch(self, assignment: set[Partition]) -> None:
        watched = [p for p in sorted(assignment) if p not in self._paused and not self.busy(p)]
        for p in set(assignment) - set(watched):
            self.fetch_watch.observe(p, None, None, busy=True)
        if not watched:
            return
        ends = self._ends(watched)
        for p in watched:
            try:
                position = self._consumer.position(TopicPartition(*p), timeout_ms=0)
            except KafkaError:  # revoked meanwhile, or no position yet
                continue
            remedy = self.fetch_watch.observe(p, position, ends.get(p), busy=False)
            if remedy is Remedy.seek:
                log.warning(
                    "%s:%d: no records for %.0fs at offset %s though the log ends at %s; "
                    "seeking there again; client state: %s",
                    *p,
                    self.fetch_watch.stall_s,
                    position,
                    ends.get(p),
                    partition_state(self._consumer, TopicPartition(*p)),
                )
                self._consumer.seek(TopicPartition(*p), position)
                if self.fetch_wait.slow_reads():
                    log.warning(
                        "fetches wait at least %d ms from now on (broker slow to read)",
                        self.fetch_wait.floor_ms,
                    )
            elif remedy is Remedy.renew:
                self.renew(f"{p[0]}:{p[1]} stalled at offset {position}")
                return

    def _ends(self, partitions: list[Partition]) -> dict[Partition, int]:
        """The log end of each: the larger of what fetches said and what the broker says
        now (a stalled fetch does not update the first; tansu answers the second short of
        the end when the last batch holds several records)."""
        tps = [TopicPartition(*p) for p in partitions]
        asked = {}
        if self.clock() >= self._ends_again_at:
            try:
                asked = self._consumer.end_offsets(tps, timeout_ms=END_OFFSETS_TIMEOUT_MS)
            except Exception:  # broker away: judge by what the fetches said for a while
                log.debug("end offsets unavailable", exc_info=True)
                self._ends_again_at = self.clock() + ENDS_BACKOFF_S
        ends: dict[Partition, int] = {}
        for tp in tps:
            known = [v for v in (self._consumer.highwater(tp), asked.get(tp)) if v is not None]
            if known:
                ends[(tp.topic, tp.partition)] = max(known)
        return ends

    def renew(self, why: str) -> None:
        """Replace the consumer; the owner hears that its partitions are lost."""
        log.warning("%s; replacing the consumer", why)
        positions: dict[TopicPartition, int | None] = {}
        if self._assigned:
            for tp in self._assigned:
                try:
                    positions[tp] = self._consumer.position(tp, timeout_ms=0)
                except KafkaError:
                    positions[tp] = None
        lost = sorted(self.assignment())
        try:
            self._consumer.close(autocommit=False)
        except Exception:
            log.warning("closing the stuck consumer failed", exc_info=True)
        self.renewals += 1
        self._rebalancing = False
        self._paused.clear()
        self.fetch_watch.forget()
        self.fetch_wait.new_consumer()
        self._consumer = self._new_consumer()
        if self._listener is not None:
            self._listener.lost(lost)
            self._unassigned_since = self.clock()
            self._consumer.subscribe(self._topics, listener=_Listener(self))
        elif self._assigned:
            self._consumer.assign(self._assigned)
            unknown = [tp for tp, at in positions.items() if at is None]
            for tp, at in positions.items():
                if at is not None:
                    self._consumer.seek(tp, at)
            self._seek_start(unknown)


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, reader: KafkaReader) -> None:
        self.reader = reader

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        log.info("revoked %d partitions", len(revoked))
        assert self.reader._listener is not None
        self.reader._listener.revoked([(tp.topic, tp.partition) for tp in revoked])
        self.reader._rebalancing = True

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        log.info("assigned %d partitions", len(assigned))
        self.reader._rebalancing = False
        # each starts at the commit, not paused: what its owner held of it was dropped
        fixes.start_afresh(self.reader._consumer, assigned)
        self.reader._paused.difference_update((tp.topic, tp.partition) for tp in assigned)
        assert self.reader._listener is not None
        self.reader._listener.assigned([(tp.topic, tp.partition) for tp in assigned])


def _log_commit_error(offsets: Any, response: Any) -> None:
    if isinstance(response, Exception):
        log.warning("offset commit failed: %s", response)
