"""Read a whole topic back, to count what the pipeline really produced."""

from __future__ import annotations

from headrace.config.settings import Settings
from headrace.transport import Record, open_transport


def read_topic(settings: Settings, topic: str) -> list[Record]:
    return list(open_transport(settings).scan(topic))
