"""The control topic (``<prefix>.control``): cancellations.

Every dispatcher reads every control record (the topic is assigned, not shared in a group),
because the request a record names may sit in any dispatcher's batcher. Applying a record is
idempotent, so the offset is committed under one group id for all of them: a restarted
dispatcher resumes there instead of re-reading the topic.
"""

from __future__ import annotations

import logging

from kafka.structs import OffsetAndMetadata, TopicPartition
from pydantic import ValidationError

from headrace.config.settings import Settings
from headrace.schemas.messages import Control
from headrace.schemas.topics import Topics
from headrace.transport.kafka import clients as kafka_clients

log = logging.getLogger(__name__)


class ControlReader:
    def __init__(self, settings: Settings) -> None:
        topic = Topics(settings.topic_prefix).control
        kafka_clients.ensure_topics(settings, [topic], partitions=1)
        self._consumer = kafka_clients.consumer(
            settings,
            group_id=f"{settings.topic_prefix}.control",
            # a consumer's fetches run in the background: an eager wait here cost the
            # dispatcher's process a quarter of a core (measured); a cancel can wait 100 ms
            fetch_max_wait_ms=settings.kafka_fetch_wait_busy_ms,
        )
        parts = self._consumer.partitions_for_topic(topic) or {0}
        self._partitions = [TopicPartition(topic, p) for p in sorted(parts)]
        self._consumer.assign(self._partitions)
        self._dirty = False

    def poll(self) -> list[Control]:
        """Control records that arrived since the last call; never blocks."""
        out: list[Control] = []
        for records in self._consumer.poll(timeout_ms=0).values():
            for record in records:
                try:
                    out.append(Control.model_validate_json(record.value))
                except ValidationError as exc:
                    log.warning("unreadable control record at offset %d: %s", record.offset, exc)
                self._dirty = True
        return out

    def commit(self) -> None:
        if not self._dirty:
            return
        offsets = {
            tp: OffsetAndMetadata(self._consumer.position(tp), "", -1) for tp in self._partitions
        }
        self._consumer.commit_async(offsets)
        self._dirty = False

    def close(self) -> None:
        try:
            self.commit()
        finally:
            self._consumer.close(autocommit=False)
