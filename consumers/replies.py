"""Reply consumers.

``ReplyListener`` reads a reply topic from its end, without a consumer group (so no group
join delay), and resolves the futures of the requests its process sent; a second reply for the
same request is dropped and counted. Its reader hears whether replies are awaited: against
tansu that sets how long fetches wait, and which partitions the stalled-fetch watch looks at
(``headrace.transport.kafka.reader``).
``stream_replies`` is for users who read a reply topic as a stream, optionally in a consumer
group with committed offsets.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future

from cachetools import FIFOCache
from pydantic import ValidationError

from headrace.config.settings import Settings
from headrace.schemas.messages import Reply, StreamDelta, final_reply, parse_reply_record
from headrace.transport import Record, Reset, Transport, open_transport

log = logging.getLogger(__name__)

ReplyKey = tuple[str, str]  # (tenant, request_id)
EAGER_PENDING_MAX = 8
SEEN_REMEMBERED = 100_000  # replies remembered to tell a duplicate from an unmatched one


class ReplyListener:
    def __init__(self, transport: Transport, topic: str) -> None:
        self.topic = topic
        self._reader = transport.reader(busy=lambda _: not self.pending())
        self._reader.assign([topic], start="end")
        self._futures: dict[ReplyKey, Future[Reply]] = {}
        self._watchers: dict[ReplyKey, Callable[[StreamDelta], None]] = {}
        self._seen: FIFOCache[ReplyKey, None] = FIFOCache(maxsize=SEEN_REMEMBERED)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reply-listener", daemon=True)
        self.duplicates = 0
        self.unmatched = 0
        self.read = 0  # reply records parsed: one per reply, whoever awaits it

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

    def forget(self, tenant: str, request_id: str) -> Future[Reply] | None:
        """Stop awaiting this request's reply; the future that awaited it, if any."""
        with self._lock:
            self._watchers.pop((tenant, request_id), None)
            return self._futures.pop((tenant, request_id), None)

    def pending(self) -> int:
        with self._lock:
            return len(self._futures)

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._reader.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            pending = self.pending()
            # a few replies awaited: fetch eagerly; a flood: save the CPU for the model
            self._reader.expect(awaited=pending > 0, flood=pending > EAGER_PENDING_MAX)
            try:
                polled = self._reader.poll(timeout_ms=50)
            except Exception:
                log.exception("reply poll failed")
                time.sleep(0.5)
                continue
            for records in polled.values():
                for record in records:
                    self._on_record(record)

    def _on_record(self, record: Record) -> None:
        self.read += 1
        try:
            reply = parse_reply_record(record.value)
        except ValidationError:
            log.warning("unreadable reply at %s@%d", record.topic, record.offset)
            return
        key = (reply.tenant, reply.request_id)
        if isinstance(reply, StreamDelta):
            with self._lock:
                watcher = self._watchers.get(key)
            if watcher is not None:
                watcher(reply)
            return
        with self._lock:
            future = self._futures.pop(key, None)
            self._watchers.pop(key, None)
        if future is not None:
            self._seen[key] = None
            future.set_result(reply)
        elif key in self._seen:
            self.duplicates += 1
        else:
            self.unmatched += 1


def stream_replies(
    settings: Settings,
    topic: str,
    *,
    group_id: str | None = None,
    from_beginning: bool = False,
    idle_timeout_s: float | None = None,
    transport: Transport | None = None,
) -> Iterator[Reply]:
    """Yield replies from ``topic`` in order, each (tenant, request_id) once.

    With ``group_id`` offsets are committed after each yielded poll, so a restarted reader
    carries on where it stopped (from the start or the end, by ``from_beginning``, the first
    time). ``idle_timeout_s`` ends the stream after that long with nothing new.
    """
    transport = transport or open_transport(settings)
    start: Reset = "beginning" if from_beginning else "end"
    reader = transport.reader(group_id, reset=start)
    if group_id is None:
        reader.assign([topic], start=start)
    else:
        reader.subscribe([topic], _NoRebalance())
    seen: FIFOCache[ReplyKey, None] = FIFOCache(maxsize=SEEN_REMEMBERED)
    last_record = time.monotonic()
    try:
        while True:
            polled = reader.poll(timeout_ms=100)
            if not polled:
                if idle_timeout_s is not None and time.monotonic() - last_record > idle_timeout_s:
                    return
                continue
            last_record = time.monotonic()
            for records in polled.values():
                for record in records:
                    reply = final_reply(record.value)  # this yields final replies only
                    if reply is None:
                        continue
                    key = (reply.tenant, reply.request_id)
                    if key in seen:
                        continue
                    seen[key] = None
                    yield reply
            if group_id is not None:
                reader.commit({p: records[-1].offset + 1 for p, records in polled.items()})
    finally:
        reader.close()


class _NoRebalance:
    """A stream reader commits as it goes: nothing to do when partitions move."""

    def assigned(self, partitions: list[tuple[str, int]]) -> None:
        pass

    def revoked(self, partitions: list[tuple[str, int]]) -> None:
        pass

    def lost(self, partitions: list[tuple[str, int]]) -> None:
        pass
