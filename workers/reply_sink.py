"""Where a worker's replies go: the reply topics, through an idempotent writer, with a
read-back for brokers that may lose what they acknowledged (``TopicReplySink``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from cachetools import FIFOCache

from headrace.config.settings import Settings
from headrace.health.tracing import Headers
from headrace.schemas.messages import Reply, StreamDelta, final_reply
from headrace.transport import Transport
from headrace.transport.base import Delivered, Reader
from headrace.workers.ledger import ReplyAt


class TopicReplySink:
    """Replies go out through an idempotent writer; failed ones are sent again until
    reply_delivery_timeout_s, so a broker or storage outage delays replies instead of
    dropping them."""

    def __init__(self, transport: Transport, settings: Settings, *, shared: bool = True) -> None:
        """``shared``: one connection to the broker for every shared sink of ``transport``
        (each still flushes only its own replies); a worker's batch threads each have a
        sink (see ``sibling``)."""
        self.transport = transport
        self.settings = settings
        self.out = transport.writer(
            settings.reply_delivery_timeout_s, idempotent=True, shared=shared
        )
        self._checker: Reader | None = None  # reads replies back (``missing``)
        self._confirmed: FIFOCache[tuple[ReplyAt, str], None] = FIFOCache(maxsize=100_000)

    def sibling(self) -> TopicReplySink:
        """A sink of its own for another thread, on this one's transport (and connection,
        when shared)."""
        return TopicReplySink(self.transport, self.settings)

    def track(self, topics: Iterable[str]) -> None:
        self.out.track(topics)

    def send(self, topic: str, reply: Reply | StreamDelta, headers: Headers = ()) -> None:
        """To ``topic``, which its client made (a worker creates no topic: the dispatcher
        refuses a request whose reply topic does not exist)."""
        value = reply.model_dump_json().encode()
        self.out.send(topic, value, key=reply.request_id.encode(), headers=headers)

    def push(self) -> None:
        self.out.push()

    def flush(self) -> list[Delivered]:
        return self.out.flush()

    def missing(self, checks: Sequence[tuple[ReplyAt, str]]) -> list[bool]:
        """For each (where a reply landed, its request id): is that reply not there? Read
        back with one reader kept for it, one pass per partition from the lowest offset
        asked; a reply found once is not read again."""
        out = [False] * len(checks)
        if not self.transport.guarantees.loses_acked_records:
            return out  # the broker keeps what it acknowledged: nothing to read back
        wanted: dict[tuple[str, int], dict[int, list[tuple[int, str]]]] = {}
        for i, (at, request_id) in enumerate(checks):
            if (at, request_id) not in self._confirmed:
                wanted.setdefault((at.topic, at.partition), {}).setdefault(at.offset, []).append(
                    (i, request_id)
                )
        for (topic, partition), offsets in wanted.items():
            found = self._read_back(topic, partition, set(offsets))
            for offset, asked in offsets.items():
                reply = final_reply(found.get(offset, b""))
                for i, request_id in asked:
                    if reply is not None and reply.request_id == request_id:
                        self._confirmed[(ReplyAt(topic, partition, offset), request_id)] = None
                    else:
                        out[i] = True
        return out

    def _read_back(self, topic: str, partition: int, offsets: set[int]) -> dict[int, bytes]:
        if self._checker is None:
            self._checker = self.transport.reader()
        tp = (topic, partition)
        self._checker.assign([topic], start="beginning")
        self._checker.seek(tp, min(offsets))
        found: dict[int, bytes] = {}
        last, idle = max(offsets), 0
        while idle < 2:
            records = self._checker.poll(500).get(tp, [])
            if not records:
                end = self._checker.highwater(tp)
                if end is not None and end <= last:
                    break  # the log ends before the last offset asked: the rest is gone
                idle += 1
                continue
            found.update({r.offset: r.value for r in records if r.offset in offsets})
            if records[-1].offset >= last:
                break
        return found
