"""Hostile input on Kafka against a running pipeline: records that once stopped a dispatcher
(their dead letters were past the producer's size limit, and every dispatcher that took the
partition over died on them again) and requests whose ``reply_to`` names a topic that is not
one of the pipeline's reply topics. Each gets a dead letter and nothing else; good requests
sent right after are answered in normal time; no process exits; nothing is answered twice."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.dead_letters import DEAD_LETTER_ORIGINAL_BYTES, DeadLetter
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import final_reply
from headrace.schemas.topics import Topics
from headrace.transport.kafka import clients as kafka_clients
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.integration.topics import read_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GOOD = 40
NORMAL_S = 20.0  # a lone request takes ~20 ms here; a batch of 40, well under a second


def hostile_records(prefix: str) -> dict[str, bytes]:
    """What each case sends, by name."""

    def request(reply_to: str) -> bytes:
        doc = {
            "request_id": f"hostile-{uuid.uuid4().hex}",
            "tenant": "faults",
            "model": "all-MiniLM-L6-v2",
            "input": "a hostile request",
            "reply_to": reply_to,
        }
        return json.dumps(doc).encode()

    return {
        "control bytes, 200 KB": bytes(range(32)) * 6_400,
        "invalid UTF-8, 350 KB": b"\xff\xfe" * 175_000,
        "a record at the producer's size limit": b"x" * 1_000_000,
        "reply_to with a space": request("a b"),
        "reply_to: a request topic": request(Topics(prefix).requests(16)),
        "reply_to: another pipeline's replies": request(f"{prefix}-other.replies.default"),
    }


def test_hostile_records_are_dead_lettered_and_good_traffic_is_answered(
    stack: LocalStack,
) -> None:
    prefix = unique_prefix("hostile")
    settings = Settings(topic_prefix=prefix)
    topics = Topics(prefix)
    cases = hostile_records(prefix)
    with Pipeline(env=pipeline_env(prefix)) as pipeline, Client(settings, tenant="t") as client:
        warm = client.submit("warm up").result(60)
        assert warm.result is not None, warm.error
        producer = kafka_clients.producer(settings, max_request_size=2 << 20)
        for raw in cases.values():
            producer.send(topics.requests(16), value=raw)
        producer.flush()
        producer.close()
        sent_at = time.monotonic()
        submissions = client.submit_many([f"good text number {i}" for i in range(GOOD)])
        replies = [s.result(60) for s in submissions]
        answered_s = time.monotonic() - sent_at
        assert pipeline.dispatcher.alive(), "the dispatcher exited"
        assert all(worker.alive() for worker in pipeline.workers), "a worker exited"

        def dead_letters() -> list[DeadLetter]:
            return [
                DeadLetter.model_validate_json(r.value)
                for r in read_topic(settings, topics.dead_letter)
            ]

        eventually(lambda: len(dead_letters()) >= len(cases), 30, "the hostile records' letters")
        letters = dead_letters()
        own_replies = [final_reply(r.value) for r in read_topic(settings, client.reply_topic)]
        others = read_topic(settings, f"{prefix}-other.replies.default")
        on_requests = read_topic(settings, topics.requests(16))
    assert all(r.result is not None for r in replies), [r.error for r in replies]
    assert answered_s < NORMAL_S, f"good requests took {answered_s:.1f}s"
    assert len(letters) == len(cases), [(x.code, x.reason) for x in letters]
    for letter in letters:
        assert len(letter.original.encode()) <= 3 * DEAD_LETTER_ORIGINAL_BYTES
        assert letter.original_bytes is not None and letter.original_sha256 is not None
    sizes = sorted(letter.original_bytes or 0 for letter in letters)
    assert sizes[-3:] == sorted(len(raw) for raw in list(cases.values())[:3])
    reply_cases = [letter for letter in letters if "reply_to" in letter.reason]
    assert len(reply_cases) == 3
    assert all(letter.code is ErrorCode.invalid_schema for letter in reply_cases)
    assert not others, "a request was answered on another pipeline's reply topic"
    assert len(on_requests) == len(cases) + 1 + GOOD  # nothing answered on a request topic
    ids = [r.request_id for r in own_replies if r is not None]
    assert len(ids) == len(set(ids)) == GOOD + 1  # nothing else, nothing twice
