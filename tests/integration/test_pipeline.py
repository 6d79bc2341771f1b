"""The pipeline end to end: SDK -> bucket topics -> dispatcher -> Celery worker (real model)
-> reply topic, on the real local stack."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator

import pytest

from headrace.config.settings import Settings
from headrace.connections import redis_client
from headrace.consumers.replies import stream_replies
from headrace.models.tokenizer import count_tokens
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.dead_letters import DeadLetter
from headrace.schemas.errors import (
    EmptyInputError,
    ErrorCode,
    InputTooLongError,
    RequestFailedError,
    UnknownModelError,
)
from headrace.schemas.messages import Reply, Request
from headrace.schemas.topics import Topics
from headrace.transport import open_transport
from headrace.transport.kafka import clients as kafka_clients
from headrace.workers.dispatcher.io.workers_seen import WorkersWatch
from headrace.workers.ledger import RedisLedger
from tests.integration.topics import read_topic
from tests.reference import cosines, reference_embeddings

pytestmark = pytest.mark.timeout(240)

MIXED = [
    "hi",
    "The quick brown fox jumps over the lazy dog.",
    "Event-driven pipelines move requests through topics; workers batch them by length.",
    " ".join(["Length buckets keep padding low when batches are formed from similar texts."] * 3),
    " ".join(["A long paragraph about channels that carry water to turbines."] * 12),
]


@pytest.fixture(scope="module")
def client(shared_pipeline: Pipeline, shared_settings: Settings) -> Iterator[Client]:
    with Client(shared_settings, tenant="tests") as c:
        yield c


def test_round_trip_matches_reference_embeddings(client: Client) -> None:
    vectors = client.embed(MIXED, wait_s=120)
    assert len(vectors) == len(MIXED) and all(len(v) == 384 for v in vectors)
    assert min(cosines(vectors, reference_embeddings(MIXED))) >= 0.999


def test_reply_timings_and_batch_facts_are_plausible(client: Client) -> None:
    start = time.monotonic()
    submissions = client.submit_many(MIXED)
    replies = [s.result(120) for s in submissions]
    elapsed_ms = (time.monotonic() - start) * 1000
    counts = count_tokens(client.settings.model, MIXED)
    for submission, reply, tokens in zip(submissions, replies, counts, strict=True):
        assert reply.result is not None and reply.timings is not None and reply.batch is not None
        t = reply.timings
        assert t.queued_ms >= 0 and t.batch_wait_ms >= 0 and t.compute_ms > 0
        assert t.queued_ms + t.batch_wait_ms + t.compute_ms <= elapsed_ms + 5
        assert t.to_worker_ms is not None and 0 <= t.to_worker_ms <= t.batch_wait_ms + 5
        assert reply.result.token_count == tokens
        assert reply.batch.bucket == submission.bucket >= tokens
        assert reply.batch.real_tokens <= reply.batch.padded_tokens
        assert reply.batch.padded_tokens == reply.batch.size * max(
            r.result.token_count
            for r in replies
            if r.batch is not None
            and r.batch.batch_id == reply.batch.batch_id
            and r.result is not None
        ) or reply.batch.size > sum(
            1 for r in replies if r.batch and r.batch.batch_id == reply.batch.batch_id
        )


def test_the_sdk_puts_each_request_on_the_topic_of_its_length(client: Client) -> None:
    """What the SDK produces (other producers on these topics are the dispatcher's to check:
    tests/integration/test_any_producer.py)."""
    client.embed(MIXED * 2)
    bounds = client.settings.buckets
    seen = 0
    for lower, upper in zip([0, *bounds], bounds, strict=False):
        for record in read_topic(
            client.settings, Topics(client.settings.topic_prefix).requests(upper)
        ):
            request = Request.model_validate_json(record.value)
            if request.tenant != client.tenant:
                continue
            assert request.token_count is not None
            assert lower < request.token_count <= upper or (lower == 0 and request.token_count == 0)
            seen += 1
    assert seen >= len(MIXED) * 2


def test_no_batch_passes_its_token_budget(client: Client) -> None:
    texts = [f"sentence number {i} " + "word " * (i % 40) for i in range(120)]
    replies = [s.result(180) for s in client.submit_many(texts)]
    budget = client.settings.max_batch_tokens
    batches = {r.batch.batch_id: r.batch for r in replies if r.batch is not None}
    assert len(batches) > 1
    for info in batches.values():
        assert info.padded_tokens <= budget or info.size == 1


def test_same_request_id_twice_gives_one_reply(client: Client) -> None:
    request_id = f"dup-{uuid.uuid4().hex}"
    ((request, bucket),) = client.prepare(["the same request, twice"], request_ids=[request_id])
    first = client.send(request, bucket)
    client.send(request, bucket)
    client.flush()
    assert first.result(60).result is not None
    client.send(request, bucket)  # and once more after it was answered
    client.flush()
    time.sleep(3)
    replies = [
        r
        for r in read_topic(client.settings, client.reply_topic)
        if json.loads(r.value)["request_id"] == request_id
    ]
    assert len(replies) == 1


def test_bad_input_is_refused_before_sending(client: Client) -> None:
    with pytest.raises(EmptyInputError):
        client.submit("   ")
    with pytest.raises(UnknownModelError):
        client.submit("hello", model="no-such-model")
    with pytest.raises(InputTooLongError, match="truncate"):
        client.submit("token " * 100_000)


def test_truncation_when_asked(client: Client) -> None:
    reply = client.submit("word " * 700, truncate=True).result(120)
    assert reply.result is not None and reply.result.truncated
    assert reply.result.token_count == 512


def test_over_long_input_sent_raw_gets_an_error_reply(client: Client) -> None:
    topics = Topics(client.settings.topic_prefix)
    request = Request(
        request_id=f"long-{uuid.uuid4().hex}",
        tenant="tests",
        model=client.settings.model,
        input="word " * 700,
        reply_to=client.reply_topic,  # no token_count: not counted
    )
    submission = client.send(request, client.settings.buckets[-1])
    client.flush()
    reply = submission.result(60)
    assert reply.error is not None and reply.error.code is ErrorCode.input_too_long
    transport = open_transport(client.settings)
    try:  # the record went to the largest bucket's topic and was answered from there
        largest = topics.requests(client.settings.buckets[-1])
        ids = [json.loads(r.value)["request_id"] for r in transport.scan(largest)]
    finally:
        transport.close()
    assert request.request_id in ids


def test_expired_deadline_gets_deadline_exceeded(client: Client) -> None:
    submission = client.submit("too late", timeout_s=-1)
    reply = submission.result(60)
    assert reply.error is not None and reply.error.code is ErrorCode.deadline_exceeded
    with pytest.raises(RequestFailedError) as failure:
        client.embed(["also too late"], timeout_s=-1)
    assert failure.value.code is ErrorCode.deadline_exceeded


def test_malformed_records_are_dead_lettered_and_the_dispatcher_goes_on(
    client: Client, shared_pipeline: Pipeline
) -> None:
    settings = client.settings
    topics = Topics(settings.topic_prefix)
    producer = kafka_clients.producer(settings)
    wrong_id = f"wrong-{uuid.uuid4().hex}"
    wrong_schema = {"request_id": wrong_id, "reply_to": client.reply_topic, "input": 42}
    future = client._listener.expect("", wrong_id)
    producer.send(topics.requests(16), b"{not json at all")
    producer.send(topics.requests(16), json.dumps(wrong_schema).encode())
    producer.send(topics.requests(16), b"\xff\xfe binary")
    producer.flush()
    producer.close()
    error_reply = future.result(60)
    assert error_reply.error is not None and error_reply.error.code is ErrorCode.invalid_schema
    assert client.embed(["still serving after bad records"])  # dispatcher kept running
    assert shared_pipeline.dispatcher.alive()
    letters = [
        DeadLetter.model_validate_json(r.value) for r in read_topic(settings, topics.dead_letter)
    ]
    codes = [letter.code for letter in letters]
    assert codes.count(ErrorCode.invalid_json) >= 2
    assert ErrorCode.invalid_schema in codes
    assert any("not json" in letter.original for letter in letters)


def test_async_embed(client: Client) -> None:
    vectors = asyncio.run(client.aembed(["async one", "async two"]))
    assert len(vectors) == 2 and len(vectors[0]) == 384


def test_stream_replies_yields_each_reply_once(client: Client) -> None:
    client.embed(["for the stream"])
    replies = list(
        stream_replies(client.settings, client.reply_topic, from_beginning=True, idle_timeout_s=1.0)
    )
    keys = [(r.tenant, r.request_id) for r in replies]
    assert len(keys) == len(set(keys)) > 0
    assert all(isinstance(r, Reply) for r in replies)


def test_the_workers_say_they_read_framed_task_bodies(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    """The dispatcher frames a batch's task only while every live worker said it reads that
    (an older worker is sent plain JSON): the pipeline's workers say so with their beats."""
    s = shared_settings
    ledger = RedisLedger(redis_client(s), s.topic_prefix, s.answered_ttl_s)
    watch = WorkersWatch(ledger, list(s.buckets), s.worker_heartbeat_s)
    seen = watch.read([])
    assert any(seen.live.values())
    assert watch.framed
