"""Reply consumers.

``ReplyListener`` reads a reply topic from its end, without a consumer group (so no group
join delay), and resolves the futures of the requests its process sent; a second reply for the
same request is dropped and counted. While replies are awaited it checks each partition's
end now and then: a fetch that stopped with replies past its position (seen after a tansu
storage outage) is sought again, then the consumer is replaced (``FetchWatch``).
``stream_replies`` is for users who read a reply topic as a stream, optionally in a consumer
group with committed offsets.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from kafka.structs import TopicPartition
from pydantic import ValidationError

from headrace.config.settings import Settings
from headrace.schemas.messages import Reply, StreamDelta, parse_reply_record
from headrace.transport.kafka import clients as kafka_clients
from headrace.transport.kafka.fetch_wait import FetchWait
from headrace.transport.kafka.fetch_watch import FetchWatch, Remedy

log = logging.getLogger(__name__)

ReplyKey = tuple[str, str]  # (tenant, request_id)
EAGER_PENDING_MAX = 8
FETCH_STALL_S = 5.0  # replies past the position, none returned: seek, then a new consumer
FETCH_CHECK_S = 1.0


class ReplyListener:
    def __init__(self, settings: Settings, topic: str, stall_s: float = FETCH_STALL_S) -> None:
        self.settings = settings
        self.topic = topic
        self._consumer = kafka_clients.consumer(settings, group_id=None)
        parts = self._consumer.partitions_for_topic(topic) or {0}
        self._partitions = [TopicPartition(topic, p) for p in sorted(parts)]
        self._consumer.assign(self._partitions)
        self._consumer.seek_to_end(*self._partitions)
        for tp in self._partitions:  # resolve the end now: replies sent after this are ours
            self._consumer.position(tp)
        self.fetch_watch = FetchWatch(stall_s, time.monotonic)
        self._fetch_checked = time.monotonic()
        self.renewals = 0
        self.fetch_wait = FetchWait(settings)
        self._futures: dict[ReplyKey, Future[Reply]] = {}
        self._watchers: dict[ReplyKey, Callable[[StreamDelta], None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reply-listener", daemon=True)
        self.duplicates = 0
        self.unmatched = 0

    def start(self) -> ReplyListener:
        self._thread.start()
        return self

    def expect(self, tenant: str, request_id: str) -> Future[Reply]:
        """The future of this request's reply; the same one if it is already awaited."""
        with self._lock:
            future = self._futures.get((tenant, request_id))
            if future is None:
                future = self._futures[(tenant, request_id)] = Future()
        return future

    def watch(self, tenant: str, request_id: str, on_delta: Callable[[StreamDelta], None]) -> None:
        """Call ``on_delta`` (on the listener's thread) with each StreamDelta of this request
        until its final reply; ``expect`` gives that reply."""
        with self._lock:
            self._watchers[(tenant, request_id)] = on_delta

    def forget(self, tenant: str, request_id: str) -> None:
        with self._lock:
            self._futures.pop((tenant, request_id), None)
            self._watchers.pop((tenant, request_id), None)

    def pending(self) -> int:
        with self._lock:
            return len(self._futures)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._consumer.close()

    def _run(self) -> None:
        seen: OrderedDict[ReplyKey, None] = OrderedDict()
        while not self._stop.is_set():
            pending = self.pending()
            now = time.monotonic()
            # a few replies awaited: fetch eagerly; a flood: save the CPU for the model
            self.fetch_wait.apply(
                self._consumer, awaited=pending > 0, flood=pending > EAGER_PENDING_MAX
            )
            if pending and now - self._fetch_checked >= FETCH_CHECK_S:
                self._fetch_checked = now
                self._watch_fetches()
            try:
                polled = self._consumer.poll(timeout_ms=50)
            except Exception:
                log.exception("reply poll failed")
                time.sleep(0.5)
                continue
            for records in polled.values():
                for record in records:
                    try:
                        reply = parse_reply_record(record.value)
                    except ValidationError:
                        log.warning("unreadable reply at %s@%d", record.topic, record.offset)
                        continue
                    key = (reply.tenant, reply.request_id)
                    if isinstance(reply, StreamDelta):
                        with self._lock:
                            watcher = self._watchers.get(key)
                        if watcher is not None:
                            watcher(reply)
                        continue
                    with self._lock:
                        future = self._futures.pop(key, None)
                        self._watchers.pop(key, None)
                    if future is not None:
                        seen[key] = None
                        if len(seen) > 100_000:
                            seen.popitem(last=False)
                        future.set_result(reply)
                    elif key in seen:
                        self.duplicates += 1
                    else:
                        self.unmatched += 1

    def _watch_fetches(self) -> None:
        """Only while replies are awaited. The end comes from the broker (a stalled fetch
        does not update the high watermark the consumer knows)."""
        try:
            ends = self._consumer.end_offsets(self._partitions)
            positions = {tp: self._consumer.position(tp, timeout_ms=0) for tp in self._partitions}
        except Exception:  # broker away: nothing to judge now
            log.debug("reply topic end offsets unavailable", exc_info=True)
            return
        for tp in self._partitions:
            position, end = positions[tp], ends.get(tp)
            remedy = self.fetch_watch.observe(tp, position, end, busy=False)
            if remedy is Remedy.seek and position is not None:
                log.warning(
                    "%s:%d: no replies for %.0fs at offset %d though the log ends at %s; "
                    "seeking there again",
                    tp.topic,
                    tp.partition,
                    self.fetch_watch.stall_s,
                    position,
                    end,
                )
                self._consumer.seek(tp, position)
            elif remedy is Remedy.renew:
                log.warning(
                    "%s:%d: still no replies at offset %s; replacing the reply consumer",
                    tp.topic,
                    tp.partition,
                    position,
                )
                self._renew_consumer(positions)
                return

    def _renew_consumer(self, positions: dict[TopicPartition, int | None]) -> None:
        """A fresh consumer that starts where the old one stood."""
        try:
            self._consumer.close()
        except Exception:
            log.warning("closing the stalled reply consumer failed", exc_info=True)
        self._consumer = kafka_clients.consumer(self.settings, group_id=None)
        self._consumer.assign(self._partitions)
        for tp, position in positions.items():
            if position is None:
                self._consumer.seek_to_end(tp)
            else:
                self._consumer.seek(tp, position)
        self.fetch_wait.new_consumer()
        self.fetch_watch.forget()
        self.renewals += 1


def stream_replies(
    settings: Settings,
    topic: str,
    *,
    group_id: str | None = None,
    from_beginning: bool = False,
    idle_timeout_s: float | None = None,
) -> Iterator[Reply]:
    """Yield replies from ``topic`` in order, each (tenant, request_id) once.

    With ``group_id`` offsets are committed after each yielded poll, so a restarted reader
    carries on where it stopped. ``idle_timeout_s`` ends the stream after that long with
    nothing new.
    """
    consumer = kafka_clients.consumer(
        settings,
        group_id=group_id,
        auto_offset_reset="earliest" if from_beginning else "latest",
    )
    if group_id is None:
        parts = consumer.partitions_for_topic(topic) or {0}
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        if from_beginning:
            consumer.seek_to_beginning(*tps)
        else:
            consumer.seek_to_end(*tps)
    else:
        consumer.subscribe([topic])
    seen: OrderedDict[ReplyKey, None] = OrderedDict()
    last_record = time.monotonic()
    try:
        while True:
            polled = consumer.poll(timeout_ms=100)
            if not polled:
                if idle_timeout_s is not None and time.monotonic() - last_record > idle_timeout_s:
                    return
                continue
            last_record = time.monotonic()
            for records in polled.values():
                for record in records:
                    try:
                        reply = Reply.model_validate_json(record.value)
                    except ValidationError:
                        continue  # unreadable, or a StreamDelta: this yields final replies
                    key = (reply.tenant, reply.request_id)
                    if key in seen:
                        continue
                    seen[key] = None
                    if len(seen) > 100_000:
                        seen.popitem(last=False)
                    yield reply
            if group_id is not None:
                consumer.commit()
    finally:
        consumer.close()
