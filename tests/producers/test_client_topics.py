"""A client on the real broker learns every bucket topic and the control topic as it
starts: a client a while up sends its first request to each bucket, and a cancel, without a
metadata wait for any of them (kafka-python learnt each topic on its first record, a
refresh each, 100 ms apart)."""

from __future__ import annotations

import uuid

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.producers.client import Client
from headrace.schemas.topics import Topics
from tests.transport.kafka.metadata import refresh, unknown_topic_waits

pytestmark = pytest.mark.timeout(90)


def test_a_client_sends_to_every_bucket_and_cancels_without_learning_a_topic(
    stack: LocalStack,
) -> None:
    settings = Settings(topic_prefix=f"t-client-topics-{uuid.uuid4().hex[:8]}")
    topics = Topics(settings.topic_prefix)
    with Client(settings, tenant="acme", listen=False) as client:
        producer = client._producer.producer  # type: ignore[attr-defined]
        expected = [*(topics.requests(b) for b in settings.buckets), topics.control]
        assert refresh(producer, expected), "the client does not track its topics"
        waited = unknown_topic_waits(producer)
        ids = [f"r{b}" for b in settings.buckets]
        prepared = client.prepare(["a text"] * len(ids), request_ids=ids)
        for (request, _), bucket in zip(prepared, settings.buckets, strict=True):
            client.send_nowait(request, bucket)  # each bucket's topic, whatever its length
        client.cancel(ids[0])
        client.flush()
        assert waited == []
