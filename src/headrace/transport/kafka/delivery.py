"""``Writer`` on kafka-python's producer: it gets records to the broker or says clearly that
it could not.

kafka-python's idempotent producer turns some broker errors into a *fatal* state (seen with
tansu while its S3 store was down: ``UnknownError`` → "Aborting producer batches due to fatal
error"), after which every send fails. ``flush`` here checks every record it sent; failed ones
are sent again on a fresh producer, with backoff, until ``timeout_s`` runs out, and only then
raises ``DeliveryError``.

tansu (S3 storage) answers the first produce after a restart with base offset -1 and no
error, and about half the time that batch is not in the log (measured: a hole of 20 offsets
where the acknowledged batch should be). An acknowledgement without an offset is therefore
uncertain: with a ``readback`` the partition is read back from the last offset known good and
only the records not found are sent again, so neither a loss nor a duplicate follows.

kafka-python 3.0.12 can also leave a producer stuck after broker restarts: a batch waiting,
nothing in flight, the leader's connection never ready again (seen once in CI, after three
restarts of tansu in 4 s: 20 records unanswered for 60 s). With a ``readback``, records
stuck like that for ``STALL_S`` are given up on that producer: it is closed (it can send
nothing more), the partition is read back, and only the records not found are sent again on
a fresh producer.

A fresh producer is made only while the broker answers: kafka-python's constructor waits up
to ``bootstrap_timeout_ms`` (30 s by default) for the cluster, which during a broker restart
ate half of a 60 s flush (seen in CI: the resend path tried a fresh producer while tansu was
down, then the stuck producer had too little time left to be given up). A replacement waits
``REPLACE_BOOTSTRAP_S`` at most and the flush tries again on its next round.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError, KafkaTimeoutError

from headrace.transport.base import Delivered, DeliveryError, Headers, Record, TransportError
from headrace.transport.kafka import fixes
from headrace.transport.kafka.diagnostics import producer_state
from headrace.transport.kafka.shared_producer import SharedProducer

log = logging.getLogger(__name__)

BACKOFF_S = (0.2, 0.5, 1.0, 2.0)
PRUNE_AT = 10_000
STALL_S = 15.0  # a batch waiting this long, nothing in flight, its leader not connected
SLICE_S = 2.0  # a flush looks at its records this often
REPLACE_BOOTSTRAP_S = 3.0  # a fresh producer waits this long for the broker, then next round


# (topic, partition, first offset or None for the partition's first) -> its records to the end
ReadBack = Callable[[str, int, int | None], Iterable[Record]]


@dataclass
class _Sent:
    topic: str
    key: bytes | None
    value: bytes
    future: Any
    headers: Headers = ()
    on: Any = None  # the producer it was sent on


class ReliableProducer:
    def __init__(
        self,
        # called bare for the first producer; with ``bootstrap_timeout_ms`` for a replacement
        factory: Callable[..., KafkaProducer],
        timeout_s: float,
        readback: ReadBack | None = None,
        share: SharedProducer | None = None,
    ) -> None:
        """``share``: the producer is the one the share's writers use (``factory`` unused;
        see ``shared_producer``); without one this writer makes and closes its own."""
        self._factory = factory
        self.timeout_s = timeout_s
        self.readback = readback
        self._share = share
        self.producer = share.acquire() if share is not None else factory()
        self._sent: list[_Sent] = []
        self._good: dict[tuple[str, int], int] = {}  # highest acknowledged offset seen
        # ``_good`` as it stood when a flush last had everything acknowledged: a record sent
        # since lands past it. ``_good`` itself is no such bound for the records of a flush:
        # a later one may be acknowledged with an offset while an earlier one was not
        # (tansu's first answer after a restart), and a read-back from past the later one
        # missed the earlier, which was sent again (a duplicate, seen with shared writers)
        self._floor: dict[tuple[str, int], int] = {}
        self._fresh: dict[tuple[str, int], int] = {}  # ``_good`` moved since (to ``_floor``)
        self._tracked: dict[str, None] = {}  # track()'s topics, told a fresh producer too
        self.replaced = 0
        self._pushed_on: KafkaProducer | None = None  # the producer ``push`` raised a flag on
        self.uncertain = 0  # acknowledgements without an offset, checked by reading back

    def track(self, topics: Iterable[str]) -> None:
        """The topics this writer will send to, their metadata asked for in one request now
        (see ``fixes.track_topics``)."""
        new = [topic for topic in topics if topic not in self._tracked]
        if new:
            self._tracked.update(dict.fromkeys(new))
            fixes.track_topics(self.producer, new)

    def send(
        self, topic: str, value: bytes, key: bytes | None = None, headers: Headers = ()
    ) -> None:
        share = self._share
        if share is not None and (not self._sent or share.given_up(self.producer)):
            # onto the current producer while nothing of ours is on the old one (or it is
            # closed: what we sent on it is read back at the flush)
            self._use(share.adopt(self.producer))
        fixes.track_topic(self.producer, topic)
        try:
            future = fixes.send(self.producer, topic, key=key, value=value, headers=list(headers))
        except KafkaError as exc:  # no metadata for the topic within max_block_ms, ...
            if share is not None and share.given_up(self.producer):
                # closed by another writer since we looked: on the fresh one
                self._use(share.adopt(self.producer))
                return self.send(topic, value, key, headers)
            retriable = bool(getattr(exc, "retriable", False)) or isinstance(exc, KafkaTimeoutError)
            raise TransportError(f"cannot send to {topic!r}: {exc!r}", retriable=retriable) from exc
        self._sent.append(_Sent(topic, key, value, future, headers, self.producer))
        if len(self._sent) >= PRUNE_AT:  # callers that rarely flush: forget the delivered
            self._sent = [s for s in self._sent if not _surely_stored(s)]

    def push(self) -> None:
        """What was sent goes out now, not at the linger (``fixes.push``); the next
        ``flush`` waits for it."""
        if self._pushed_on is None and self._sent:
            fixes.push(self.producer)
            self._pushed_on = self.producer

    def flush(self) -> list[Delivered]:
        """Where each record sent since the last flush landed. Records still unanswered at
        the timeout stay pending (never sent twice from here) and DeliveryError says so;
        records the broker refused are sent again on a fresh producer until then."""
        try:
            return self._flush()
        finally:
            if self._pushed_on is not None:
                fixes.pushed(self._pushed_on)
                self._pushed_on = None

    def _flush(self) -> list[Delivered]:
        deadline = time.monotonic() + self.timeout_s
        attempt = 0
        delivered: list[Delivered] = []
        stuck_since: float | None = None
        while True:
            pending, self._sent = self._sent, []
            with contextlib.suppress(KafkaTimeoutError):  # some are still unanswered
                slice_s = min(SLICE_S, deadline - time.monotonic())
                self.producer.flush(timeout=max(0.1, slice_s))
            waiting = [s for s in pending if not s.future.is_done]
            acked = [s for s in pending if s.future.is_done and s.future.succeeded()]
            failed = [s for s in pending if s.future.is_done and not s.future.succeeded()]
            moved = False
            if self._share is not None:
                # records on a shared producer another writer closed as stuck: read back, as
                # our own give-up does; only what is not there goes again
                share = self._share
                closed = [s for s in waiting + failed if share.given_up(s.on)]
                if closed:
                    found, missing = self._look_for(closed)
                    delivered += found
                    gone = {id(s) for s in closed}
                    waiting = [s for s in waiting if id(s) not in gone]
                    failed = [s for s in failed if id(s) not in gone] + missing
                    self._use(share.adopt(self.producer))
                    moved = True
            unsure = self._note_offsets(acked)
            lost = self._not_stored(unsure)
            failed += lost
            lost_ids = {id(s) for s in lost}
            delivered += [_delivered(s) for s in acked if id(s) not in lost_ids]
            stuck_since = self._stuck_since(waiting, stuck_since)
            given_up = None
            if stuck_since is not None and time.monotonic() - stuck_since >= STALL_S:
                given_up = self._give_up(waiting)  # on a fresh producer when not None
                if given_up is not None:
                    found, missing = given_up
                    delivered += found
                    waiting, failed, moved = [], failed + missing, True
                else:  # no fresh producer yet: try again next round, not a whole stall later
                    stuck_since = time.monotonic() - STALL_S
            if not failed and not waiting:  # all of ours acknowledged: what comes lands past
                self._floor.update(self._fresh)
                self._fresh.clear()
                return delivered
            if time.monotonic() >= deadline:
                for s in waiting[:3]:
                    log.warning(
                        "unanswered record for %s: %s",
                        s.topic,
                        producer_state(self.producer, s.future),
                    )
                self._sent = waiting + failed
                raise DeliveryError(
                    f"{len(waiting)} records unanswered and {len(failed)} refused after "
                    f"{self.timeout_s:.0f}s: {_error(failed)!r}"
                )
            if waiting:  # in flight on this producer: wait for them, send nothing again
                self._sent = waiting + failed
                continue
            log.warning(
                "%d records not delivered (%r); sending them again", len(failed), _error(failed)
            )
            if not moved:  # (on a fresh producer already when moved)
                time.sleep(BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)])
                attempt += 1
                self._replace()
            for s in failed:
                self.send(s.topic, s.value, s.key, s.headers)

    def _note_offsets(self, acked: list[_Sent]) -> list[_Sent]:
        """Remember each partition's highest acknowledged offset; return the records whose
        acknowledgement came without one."""
        unsure = []
        for s in acked:
            meta = s.future.value
            if meta.offset < 0:
                unsure.append(s)
            else:
                key = (meta.topic, meta.partition)
                self._good[key] = self._fresh[key] = max(self._good.get(key, -1), meta.offset)
        return unsure

    def _not_stored(self, unsure: list[_Sent]) -> list[_Sent]:
        """Of the records acknowledged without an offset, those the partition does not hold
        (read back from the last offset known good). Unchecked (no readback, or the read
        failed): all of them count as stored, as before: a resend could duplicate."""
        if not unsure or self.readback is None:
            return []
        self.uncertain += len(unsure)
        missing: list[_Sent] = []
        by_partition: dict[tuple[str, int], list[_Sent]] = {}
        for s in unsure:
            by_partition.setdefault((s.topic, s.future.value.partition), []).append(s)
        for (topic, partition), group in by_partition.items():
            try:
                held = self._read_back(topic, partition)
            except Exception as exc:
                log.warning(
                    "could not read %s[%d] back (%r); assuming stored", topic, partition, exc
                )
                continue
            gone = [s for s in group if (s.key, s.value) not in held]
            log.warning(
                "%s[%d]: %d records acknowledged without an offset, %d of them not in the log",
                topic,
                partition,
                len(group),
                len(gone),
            )
            missing += gone
        return missing

    def _read_back(self, topic: str, partition: int) -> dict[tuple[bytes | None, bytes], int]:
        """The partition's records past where the flush's records can be: (key, value) ->
        offset. From ``_floor`` (every record not yet acknowledged was sent after it); a
        partition this writer has no complete flush on yet: from the last offset known good
        (reading it from its start instead could read a long reply topic whole)."""
        assert self.readback is not None
        tp = (topic, partition)
        start = self._floor.get(tp, self._good.get(tp))
        return {
            (r.key, r.value): r.offset
            for r in self.readback(topic, partition, None if start is None else start + 1)
        }

    def _stuck_since(self, waiting: list[_Sent], since: float | None) -> float | None:
        """When the producer began to look stuck on ``waiting`` (see above), or None."""
        if not waiting or self.readback is None:
            return None
        state = producer_state(self.producer, waiting[0].future)
        if state.get("in_flight") == 0 and state.get("ready") is False:
            return time.monotonic() if since is None else since
        return None

    def _give_up(self, waiting: list[_Sent]) -> tuple[list[Delivered], list[_Sent]] | None:
        """Close the stuck producer (a fresh one takes its place), then read the partitions
        back: where the waiting records landed, and those that did not. None (nothing given
        up, the records wait on) when there is no fresh producer or no read-back yet."""
        assert self.readback is not None
        stuck = self.producer
        if self._share is not None:
            fresh = self._share.give_up(stuck, bootstrap_timeout_ms=_replace_ms())
            if fresh is not None:
                self._use(fresh)
                self.replaced += 1
        else:
            self._replace()
        if self.producer is stuck:
            return None
        log.warning(
            "%d records stuck on a producer; reading back before sending again", len(waiting)
        )
        return self._look_for(waiting)

    def _look_for(self, unsent: list[_Sent]) -> tuple[list[Delivered], list[_Sent]]:
        """Records on a producer closed before they were answered: where those that reached
        the log landed, and the rest (read back per partition; a partition that cannot be
        read: all its records count as missing, sent again at worst twice)."""
        found: list[Delivered] = []
        missing: list[_Sent] = []
        by_partition: dict[tuple[str, int], list[_Sent]] = {}
        for s in unsent:
            partition = _partition_of(s)
            if partition is None:
                missing.append(s)  # never given a partition: it cannot have been sent
            else:
                by_partition.setdefault((s.topic, partition), []).append(s)
        for (topic, partition), group in by_partition.items():
            try:
                held = self._read_back(topic, partition)
            except Exception as exc:
                log.warning("could not read %s[%d] back (%r): sending again", topic, partition, exc)
                held = {}  # the stuck producer is closed: sent again, at worst twice
            for s in group:
                offset = held.get((s.key, s.value))
                if offset is None:
                    missing.append(s)
                else:
                    found.append(Delivered(topic, partition, offset, s.key))
        return found, missing

    def _replace(self) -> None:
        """A fresh producer first (creating one fails while the broker is unreachable: then
        keep the old one and try again on the next round), then close the failed one (a
        shared one: retired, closed once its last writer has left it)."""
        try:
            if self._share is not None:
                fresh = self._share.replace(self.producer, bootstrap_timeout_ms=_replace_ms())
            else:
                fresh = self._factory(bootstrap_timeout_ms=_replace_ms())
        except Exception as exc:
            log.warning("no fresh producer yet (%r); keeping the old one", exc)
            return
        old = self.producer
        self._use(fresh)
        if self._share is None:
            try:
                old.close(timeout=0)
            except Exception:  # a producer in a fatal state may fail to close; dropped anyway
                log.debug("closing the failed producer", exc_info=True)
        self.replaced += 1

    def _use(self, producer: KafkaProducer) -> None:
        """Send on ``producer`` from now on, our topics tracked there."""
        if producer is not self.producer:
            self.producer = producer
            fixes.track_topics(producer, self._tracked)

    def close(self, timeout_s: float = 5) -> None:
        if self._share is not None:
            self._share.release(self.producer)
        else:
            self.producer.close(timeout=timeout_s)


def _replace_ms() -> int:
    return int(REPLACE_BOOTSTRAP_S * 1000)


def _error(failed: list[_Sent]) -> object:
    if not failed:
        return "timeout"
    future = failed[0].future
    return future.exception if future.failed() else "no offset"


def _delivered(sent: _Sent) -> Delivered:
    """Where the broker put it (offset -1: acknowledged without one, found on read-back)."""
    meta = sent.future.value
    return Delivered(sent.topic, meta.partition, meta.offset, sent.key)


def _partition_of(sent: _Sent) -> int | None:
    tp = getattr(getattr(sent.future, "_produce_future", None), "topic_partition", None)
    return None if tp is None else int(tp.partition)


def _surely_stored(sent: _Sent) -> bool:
    f = sent.future
    return bool(f.is_done and f.succeeded() and f.value.offset >= 0)
