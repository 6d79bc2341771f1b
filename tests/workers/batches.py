"""A batch as the dispatcher would send it, for batch-runner tests."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from headrace.config.settings import Settings
from headrace.schemas.messages import Batch, BatchItem, RecordRef, Request
from headrace.schemas.topics import Topics
from headrace.transport import open_transport
from headrace.transport.memory import MemoryTransport
from headrace.workers.reply_sink import TopicReplySink


def make_batch(prefix: str, texts: list[str], model: str, **request_fields: Any) -> Batch:
    """One request per text (tenant ``runner``, bucket 16); ``request_fields`` are added to
    every request (task, params, ...)."""
    items = [
        BatchItem(
            request=Request(
                request_id=f"r{i}-{uuid.uuid4().hex[:6]}",
                tenant="runner",
                model=model,
                input=text,
                reply_to=Topics(prefix).replies("runner"),
                created_at=datetime.now(UTC),
                **request_fields,
            ),
            ref=RecordRef(topic=f"{prefix}.requests.b16", partition=0, offset=i),
            arrived_at=datetime.now(UTC).timestamp(),
        )
        for i, text in enumerate(texts)
    ]
    return Batch(
        batch_id=uuid.uuid4().hex, bucket=16, dispatcher_id="d", dispatched_at=0, items=items
    )


def runner_sink(settings: Settings) -> TopicReplySink:
    """A worker's reply sink for batches of ``make_batch``, with their reply topic made first
    (as their client would: a worker creates no topics)."""
    transport = open_transport(settings)
    transport.ensure_topics([Topics(settings.topic_prefix).replies("runner")], partitions=1)
    return TopicReplySink(transport, settings)


def memory_sink(settings: Settings) -> tuple[TopicReplySink, MemoryTransport]:
    """``runner_sink`` on the in-memory transport (its contract test holds it to Kafka's
    behaviour), and the transport to read the replies from."""
    transport = MemoryTransport()
    transport.ensure_topics([Topics(settings.topic_prefix).replies("runner")], partitions=1)
    return TopicReplySink(transport, settings), transport
