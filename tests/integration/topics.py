"""Read a whole topic back, to count what the pipeline really produced."""

from __future__ import annotations

from kafka.consumer.fetcher import ConsumerRecord

from headrace.config.settings import Settings
from headrace.transport.kafka.scan import records_from_start


def read_topic(settings: Settings, topic: str) -> list[ConsumerRecord]:
    return list(records_from_start(settings, topic))
