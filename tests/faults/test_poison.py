"""A flood of poison: malformed records (random bytes, bad JSON, wrong schema, oversized) and
inputs that make the model raise, mixed into FAULT_REQUESTS (600 by default) good
requests. Every good request gets its result, every poison input its own error, every
malformed record a dead letter (and an error reply where it names a reply topic), each
exactly once. Then the redelivery cap: an input that kills its worker is isolated by
splitting and dead-lettered; its batch-mates are answered."""

from __future__ import annotations

import collections
import json
import random
import threading
import time
import uuid

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.dead_letters import DeadLetter
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Request
from headrace.schemas.topics import Topics
from headrace.transport.kafka import clients as kafka_clients
from headrace.workers.faults import CRASH_EXIT_CODE
from tests.conftest import pipeline_env, unique_prefix
from tests.faults.harness import (
    FAST_FAULTS,
    Run,
    assert_serves,
    count_on_topic,
    fault_texts,
    print_log_tails,
)
from tests.integration.topics import read_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

POISON = "<<poison>>"
CRASH = "<<crash>>"
MAX_BYTES = 16 * 1024


def malformed_records(count: int, reply_to: str, rng: random.Random) -> list[tuple[bytes, bool]]:
    """(record, names a reply topic) pairs of four kinds."""
    out: list[tuple[bytes, bool]] = []
    for i in range(count):
        rid = f"bad-{uuid.uuid4().hex}"
        kind = i % 4
        if kind == 0:
            out.append((rng.randbytes(rng.randint(1, 300)), False))
        elif kind == 1:
            out.append((b'{"request_id": "' + rid.encode() + b'", "input": ', False))
        elif kind == 2:
            doc = {"request_id": rid, "tenant": "faults", "reply_to": reply_to, "input": 42}
            out.append((json.dumps(doc).encode(), True))
        else:
            doc = {
                "request_id": rid,
                "tenant": "faults",
                "reply_to": reply_to,
                "input": "x" * MAX_BYTES,
            }
            out.append((json.dumps(doc).encode(), True))
    return out


def test_poison_flood(stack: LocalStack) -> None:
    prefix = unique_prefix("poison")
    env = pipeline_env(
        prefix,
        HEADRACE_FAULT_POISON_MARKER=POISON,
        HEADRACE_MAX_REQUEST_BYTES=str(MAX_BYTES),
        HEADRACE_BREAKER_MIN_REQUESTS="100000",  # this test wants every poison item computed
        **FAST_FAULTS,
    )
    settings = Settings(topic_prefix=prefix, max_request_bytes=MAX_BYTES)
    topics = Topics(prefix)
    rng = random.Random(13)
    texts = fault_texts(seed=10)
    poisoned = set(rng.sample(range(len(texts)), 100))
    texts = [f"{t} {POISON}" if i in poisoned else t for i, t in enumerate(texts)]
    with Pipeline(env=env) as pipeline, Client(settings, tenant="faults") as client:
        bad = malformed_records(400, client.reply_topic, rng)
        producer = kafka_clients.producer(settings)
        fault_at = time.monotonic()
        for raw, _ in bad[:200]:
            producer.send(topics.requests(16), value=raw)
        producer.flush()
        run = Run(client, texts)
        for raw, _ in bad[200:]:
            producer.send(topics.requests(rng.choice(settings.buckets)), value=raw)
        producer.flush()
        producer.close()
        replies = run.replies()
        ids = {s.request.request_id for s in run.submissions}
        outcome = count_on_topic(
            settings,
            client.reply_topic,
            ids,
            "flood of poison records",
            run.recovery_s(fault_at),
            replies,
            all_answered_s=run.all_answered_s(fault_at),
        )
        if outcome.lost or outcome.duplicates:
            print_log_tails(pipeline)
        assert_serves(client, pipeline)
        letters = [
            DeadLetter.model_validate_json(r.value)
            for r in read_topic(settings, topics.dead_letter)
        ]
        error_replies = collections.Counter(
            json.loads(r.value)["request_id"]
            for r in read_topic(settings, client.reply_topic)
            if json.loads(r.value)["request_id"].startswith("bad-")
        )
    outcome.assert_clean()
    for i, reply in enumerate(replies):
        assert reply is not None
        if i in poisoned:
            assert reply.error is not None and reply.error.code is ErrorCode.model_error
        else:
            assert reply.result is not None, reply.error
    assert len(letters) == len(bad)
    codes = collections.Counter(letter.code for letter in letters)
    assert codes[ErrorCode.request_too_large] == 100
    assert codes[ErrorCode.invalid_schema] >= 100  # wrong types (and random bytes that parse)
    assert codes[ErrorCode.invalid_json] + codes[ErrorCode.invalid_schema] == 300
    assert sum(error_replies.values()) == sum(1 for _, named in bad if named) == 200
    assert max(error_replies.values()) == 1


def test_worker_killing_input_is_isolated_and_dead_lettered(stack: LocalStack) -> None:
    prefix = unique_prefix("crash-cap")
    env = pipeline_env(
        prefix, HEADRACE_FAULT_CRASH_MARKER=CRASH, HEADRACE_MAX_WAIT_MS="500", **FAST_FAULTS
    )
    settings = Settings(topic_prefix=prefix)
    stop = threading.Event()
    exits = collections.Counter[int | None]()
    with (
        Pipeline(env=env, worker_buckets=["16", "16"]) as pipeline,
        Client(settings, tenant="faults") as client,
    ):

        def restart_dead() -> None:
            for worker in pipeline.workers:
                if not worker.alive():
                    exits[worker.exit_code()] += 1
                    worker.launch()  # not waiting for it: the other may die meanwhile

        def supervise() -> None:  # restart dead workers, as systemd or Kubernetes would
            while not stop.wait(0.2):
                restart_dead()

        supervisor = threading.Thread(target=supervise, daemon=True)
        supervisor.start()
        try:
            texts = [f"short text {i}" for i in range(15)]
            texts.insert(7, f"short text {CRASH}")
            submissions = client.submit_many(texts)  # halving isolates the crasher
            replies = [s.result(300) for s in submissions]
        finally:
            stop.set()
            supervisor.join(timeout=60)
        restart_dead()  # the last crash came before the reply that gave the request up
        letters = [
            DeadLetter.model_validate_json(r.value)
            for r in read_topic(settings, Topics(prefix).dead_letter)
        ]
        outcome = count_on_topic(
            settings,
            client.reply_topic,
            {s.request.request_id for s in submissions},
            "input that kills its worker",
            0.0,
        )
    crasher = replies[7]
    assert crasher.error is not None and crasher.error.code is ErrorCode.redelivery_exhausted
    assert all(r.result is not None for i, r in enumerate(replies) if i != 7)
    outcome.assert_clean()
    assert [Request.model_validate_json(letter.original).input for letter in letters] == [texts[7]]
    # It did crash its worker that many times at least (more when it shared batches first).
    assert exits[CRASH_EXIT_CODE] >= settings.max_attempts, exits
