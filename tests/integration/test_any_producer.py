"""Trust no producer, end to end: a plain Kafka client (kafka-python, not the SDK) writes
request JSON by the exported schema, the way a service in another language would. A request
on the wrong bucket topic, one lying about its token count, one on the unbucketed topic and
one past the largest bucket are each answered once, correctly, from their proper bucket."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime

import pytest
from kafka import KafkaConsumer
from kafka.structs import TopicPartition

from headrace.config.settings import Settings
from headrace.models.tokenizer import count_tokens
from headrace.ops.processes import Pipeline
from headrace.schemas.buckets import bucket_for
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import EmbeddingResult, Reply
from headrace.schemas.topics import Topics
from headrace.transport import open_transport
from headrace.transport.kafka import clients as kafka_clients

pytestmark = pytest.mark.timeout(240)

LONG = " ".join(["Water runs from the weir along the headrace to the wheel."] * 8)  # ~98 tokens
HUGE = " ".join(["A channel carries water to a turbine."] * 80)  # past 512 tokens


def request_json(request_id: str, text: str, reply_to: str, **extra: object) -> bytes:
    """What a producer in any language writes: plain JSON by the request schema."""
    body = {
        "schema_version": 1,
        "request_id": request_id,
        "tenant": "any-producer",
        "model": "all-MiniLM-L6-v2",
        "input": text,
        "reply_to": reply_to,
        "created_at": datetime.now(UTC).isoformat(),
        **extra,
    }
    return json.dumps(body).encode()


def replies_for(settings: Settings, topic: str, ids: set[str], timeout_s: float) -> list[Reply]:
    consumer = KafkaConsumer(**kafka_clients.consumer_options(settings, group_id=None))
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    found: list[Reply] = []
    deadline = time.monotonic() + timeout_s
    try:
        while {r.request_id for r in found} < ids and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                found += [Reply.model_validate_json(r.value) for r in records]
    finally:
        consumer.close()
    return found


def test_requests_from_a_plain_kafka_producer_are_counted_and_routed(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    settings = shared_settings
    topics = Topics(settings.topic_prefix)
    reply_to = topics.replies(f"plain-{uuid.uuid4().hex[:6]}")
    kafka_clients.ensure_topics(settings, [reply_to], partitions=1)
    tokens = count_tokens(settings.model, [LONG, HUGE])
    proper = bucket_for(tokens[0], settings.buckets)
    assert proper > 16 and tokens[1] > settings.buckets[-1]
    sent = {
        "wrong-topic": (topics.requests(16), request_json("wrong-topic", LONG, reply_to)),
        "lying": (topics.requests(16), request_json("lying", LONG, reply_to, token_count=5)),
        "unbucketed": (topics.ingress, request_json("unbucketed", LONG, reply_to)),
        "huge": (topics.ingress, request_json("huge", HUGE, reply_to)),
    }
    producer = kafka_clients.producer(settings)
    for request_id, (topic, value) in sent.items():
        producer.send(topic, value, key=request_id.encode())
    producer.flush(timeout=30)
    producer.close()

    replies = replies_for(settings, reply_to, set(sent), timeout_s=120)
    by_id = {r.request_id: r for r in replies}
    assert sorted(r.request_id for r in replies) == sorted(sent)  # each answered once
    for request_id in ("wrong-topic", "lying", "unbucketed"):
        reply = by_id[request_id]
        assert isinstance(reply.result, EmbeddingResult), reply
        assert reply.result.token_count == tokens[0]
        assert reply.batch is not None and reply.batch.bucket == proper
        assert reply.batch.padded_tokens <= reply.batch.size * proper  # no row past its bucket
    huge = by_id["huge"]
    assert huge.error is not None and huge.error.code is ErrorCode.input_too_long
    assert str(tokens[1]) in huge.error.message


def test_a_request_forwarded_again_is_answered_once(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    """A router killed after its forward was acknowledged but before its offset was committed
    reads the request again and forwards a second copy: the ledger answers it once."""
    settings = shared_settings
    topics = Topics(settings.topic_prefix)
    reply_to = topics.replies(f"again-{uuid.uuid4().hex[:6]}")
    kafka_clients.ensure_topics(settings, [reply_to], partitions=1)
    proper = topics.requests(bucket_for(count_tokens(settings.model, [LONG])[0], settings.buckets))
    request_id = f"again-{uuid.uuid4().hex[:8]}"
    key = request_id.encode()
    producer = kafka_clients.producer(settings)
    try:
        producer.send(
            topics.ingress, request_json(request_id, LONG, reply_to), key=key, partition=0
        )
        producer.flush(timeout=30)
        [first] = replies_for(settings, reply_to, {request_id}, timeout_s=120)
        assert isinstance(first.result, EmbeddingResult)
        # the same record again, as the restarted router reads it, then a marker behind it
        # with the same key (so the same partitions here and in the bucket topic): once the
        # marker is answered, the copy was read and batched too
        producer.send(
            topics.ingress, request_json(request_id, LONG, reply_to), key=key, partition=0
        )
        marker = request_json(f"{request_id}-m", LONG, reply_to)
        producer.send(topics.ingress, marker, key=key, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close()
    ids = {request_id, f"{request_id}-m"}
    replies_for(settings, reply_to, ids, timeout_s=120)
    time.sleep(3)  # room for a second answer, were one coming
    transport = open_transport(settings)
    try:
        replies = [Reply.model_validate_json(r.value) for r in transport.scan(reply_to)]
        copies = [r for r in transport.scan(proper) if json.loads(r.value)["request_id"] in ids]
    finally:
        transport.close()
    assert sorted(r.request_id for r in replies) == sorted(ids)  # the copy: no second answer
    assert len(copies) == 3  # the request forwarded twice, and the marker
