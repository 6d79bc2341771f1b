"""Restart Redis and lose its data (Celery queues, claims, completion notices, answered marks)
with requests in flight: Kafka is the truth, so every request is still answered exactly once."""

from __future__ import annotations

import time

import pytest

from producers.client import Client
from runtime.localstack import LocalStack
from runtime.processes import Pipeline
from runtime.settings import Settings
from tests.conftest import pipeline_env, unique_prefix
from tests.faults.harness import (
    FAST_FAULTS,
    FAULT_REQUESTS,
    Run,
    assert_serves,
    count_on_topic,
    fault_texts,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_redis_restarted_empty_mid_run(stack: LocalStack) -> None:
    prefix = unique_prefix("redis-loss")
    settings = Settings(topic_prefix=prefix)
    with (
        Pipeline(env=pipeline_env(prefix, **FAST_FAULTS)) as pipeline,
        Client(settings, tenant="faults") as client,
    ):
        run = Run(client, fault_texts(seed=7))
        run.wait_for(FAULT_REQUESTS // 5)
        fault_at = time.monotonic()
        stack.stop_service("redis")  # no persistence: everything in it is gone
        assert run.answered() < FAULT_REQUESTS, "restarted too late to prove anything"
        stack.up(only=("redis",))
        replies = run.replies()
        outcome = count_on_topic(
            settings,
            client.reply_topic,
            {s.request.request_id for s in run.submissions},
            "restart Redis, losing its data",
            run.recovery_s(fault_at),
        )
        assert_serves(client, pipeline)
    assert (outcome.lost, outcome.duplicates) == (0, 0), outcome
    assert all(r is not None and r.result is not None for r in replies), outcome.errors
