"""The reply listener on a real broker: it resolves the futures of replies sent after it
started, counts a second reply for the same request as a duplicate, and gets past a fetch
that stopped with replies in the log past its position (a paused partition stands in for the
stall seen after a tansu storage outage: the consumer fetches nothing there)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from headrace.config.settings import Settings
from headrace.consumers.replies import ReplyListener
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Reply
from headrace.transport.kafka import clients as kafka_clients
from headrace.transport.kafka.delivery import reliable_producer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def topic(stack: LocalStack) -> Iterator[tuple[Settings, str]]:
    settings = Settings(topic_prefix=f"t-replies-{uuid.uuid4().hex[:8]}")
    name = f"{settings.topic_prefix}.replies"
    kafka_clients.ensure_topics(settings, [name], partitions=1)
    yield settings, name


def send_reply(settings: Settings, topic: str, request_id: str) -> None:
    reply = Reply.failure(request_id, "acme", "m", ErrorCode.internal, "a reply")
    producer = reliable_producer(settings, timeout_s=10)
    try:
        producer.send(topic, reply.model_dump_json().encode(), key=request_id.encode())
        producer.flush()
    finally:
        producer.close()


def test_listener_resolves_replies_and_counts_duplicates(topic: tuple[Settings, str]) -> None:
    settings, name = topic
    listener = ReplyListener(settings, name).start()
    try:
        future = listener.expect("acme", "r1")
        send_reply(settings, name, "r1")
        assert future.result(timeout=20).request_id == "r1"
        send_reply(settings, name, "r1")
        send_reply(settings, name, "other")
        marker = listener.expect("acme", "r2")
        send_reply(settings, name, "r2")
        marker.result(timeout=20)
        assert (listener.duplicates, listener.unmatched) == (1, 1)
        assert listener.renewals == 0
    finally:
        listener.close()


def test_listener_gets_past_a_stalled_fetch(topic: tuple[Settings, str]) -> None:
    settings, name = topic
    listener = ReplyListener(settings, name, stall_s=1.0)
    listener._consumer.pause(*listener._partitions)  # before its thread runs: no fetches
    listener.start()
    try:
        future = listener.expect("acme", "stalled")
        send_reply(settings, name, "stalled")
        reply = future.result(timeout=30)
        assert reply.request_id == "stalled"
        assert listener.renewals == 1  # a seek does not resume a paused partition; renewal does
    finally:
        listener.close()
