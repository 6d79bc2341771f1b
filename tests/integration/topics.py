"""Read a whole topic back, to count what the pipeline really produced."""

from __future__ import annotations

import time

from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import TopicPartition

from runtime import connections
from runtime.settings import Settings


def read_topic(settings: Settings, topic: str, idle_s: float = 1.5) -> list[ConsumerRecord]:
    consumer = connections.consumer(settings, group_id=None)
    try:
        parts = consumer.partitions_for_topic(topic) or {0}
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records: list[ConsumerRecord] = []
        last = time.monotonic()
        while time.monotonic() - last < idle_s:
            for batch in consumer.poll(timeout_ms=200).values():
                records.extend(batch)
                last = time.monotonic()
        return records
    finally:
        consumer.close()
