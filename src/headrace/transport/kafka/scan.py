"""Read a topic as it stands: from its first offset (or a given one) up to the log end each
partition had at its first fetch. Reaching that offset is the stop condition, not a quiet spell: a
broker slow to answer one fetch must not cut the read short (recovery and audits count on it).

The log end is the high watermark of a fetch response. tansu answers ListOffsets(latest),
which ``end_offsets`` asks, with the base offset of the last record batch plus one, short of
the true end when that batch holds several records (measured: 3 one-record batches then one
of 5 gave 4, not 8), so ``end_offsets`` is not used."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from headrace.config.settings import Settings
from headrace.transport.base import Record
from headrace.transport.kafka import clients as kafka_clients

log = logging.getLogger(__name__)


def records_from_start(
    settings: Settings, topic: str, stall_timeout_s: float = 15.0
) -> Iterator[Record]:
    """Yield every record of ``topic`` up to the log end its first fetch saw. Gives up (with
    a warning) only if nothing comes for ``stall_timeout_s`` while some are still missing."""
    consumer = kafka_clients.consumer(settings, group_id=None)
    try:
        parts = consumer.partitions_for_topic(topic) or {0}
        starts: dict[TopicPartition, int | None] = {
            TopicPartition(topic, p): None for p in sorted(parts)
        }
        yield from _read(consumer, starts, stall_timeout_s)
    finally:
        consumer.close()


def records_after(
    settings: Settings, topic: str, partition: int, offset: int | None, stall_timeout_s: float = 5.0
) -> Iterator[Record]:
    """Yield the records of one partition from ``offset`` (None: its first) up to the log end
    its first fetch saw."""
    consumer = kafka_clients.consumer(settings, group_id=None)
    try:
        yield from _read(consumer, {TopicPartition(topic, partition): offset}, stall_timeout_s)
    finally:
        consumer.close()


def _read(
    consumer: KafkaConsumer, starts: dict[TopicPartition, int | None], stall_timeout_s: float
) -> Iterator[Record]:
    tps = list(starts)
    consumer.assign(tps)
    for tp, offset in starts.items():
        if offset is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, offset)
    ends: dict[TopicPartition, int] = {}
    last = time.monotonic()
    while True:
        polled = consumer.poll(timeout_ms=200)
        if polled:
            last = time.monotonic()
        for tp in tps:
            if tp not in ends and (high := consumer.highwater(tp)) is not None:
                ends[tp] = high
        for tp, records in polled.items():
            for record in records:
                if record.offset < ends.get(tp, record.offset + 1):
                    yield Record(
                        tp.topic,
                        tp.partition,
                        record.offset,
                        record.key,
                        record.value,
                        tuple((k, v or b"") for k, v in record.headers or ()),
                    )
        left = [tp for tp in tps if tp not in ends or consumer.position(tp) < ends[tp]]
        if not left:
            return
        if time.monotonic() - last > stall_timeout_s:
            log.warning(
                "%s: nothing for %.0fs; stopping short on partitions %s",
                tps[0].topic,
                stall_timeout_s,
                sorted(tp.partition for tp in left),
            )
            return
