"""Zero cold-start failures: requests sent the moment a dispatcher is up, while its workers
are still starting and loading their model, are all answered (not ``unavailable``)."""

from __future__ import annotations

import time

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from tests.conftest import pipeline_env, unique_prefix

pytestmark = pytest.mark.timeout(300)


def test_requests_sent_before_any_worker_is_up_are_all_answered(stack: LocalStack) -> None:
    prefix = unique_prefix("cold")
    # degrade_after_s far below a worker's start-up: a bucket that lost its workers would
    # answer unavailable long before these workers are ready
    env = pipeline_env(prefix, HEADRACE_DEGRADE_AFTER_S="0.5", HEADRACE_WORKER_HEARTBEAT_S="0.5")
    texts = [f"cold start request {i} " + "word " * (i % 40) for i in range(200)]
    with (
        Pipeline(env=env, worker_buckets=[]) as pipeline,
        Client(Settings(topic_prefix=prefix), tenant="cold") as client,
    ):
        submissions = client.submit_many(texts)
        client.flush()
        sent_at = time.monotonic()
        assert not any(w.alive() for w in pipeline.workers)  # none is up yet
        pipeline.add_worker("all")  # its start takes seconds: far past degrade_after_s
        ready_after = time.monotonic() - sent_at
        replies = [s.result(120) for s in submissions]
    errors = [r.error for r in replies if r.error is not None]
    assert errors == []  # not one unavailable
    assert len({r.request_id for r in replies}) == 200
    assert ready_after > 0.5  # the workers came up after degrade_after_s had passed
