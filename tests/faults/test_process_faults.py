"""kill -9 a worker, kill -9 the dispatcher: with requests in flight, every request is
answered exactly once (counted on the reply topic) and the pipeline serves afterwards."""

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


def test_worker_killed_mid_run(stack: LocalStack) -> None:
    prefix = unique_prefix("kill-worker")
    env = pipeline_env(prefix, HEADRACE_TORCH_THREADS="1", **FAST_FAULTS)
    settings = Settings(topic_prefix=prefix)
    with (
        Pipeline(env=env, worker_buckets=["all", "all"]) as pipeline,
        Client(settings, tenant="faults") as client,
    ):
        run = Run(client, fault_texts())
        run.wait_for(FAULT_REQUESTS // 5)
        fault_at = time.monotonic()
        pipeline.workers[0].kill()  # mid-batch: its claims and its batch die with it
        assert run.answered() < FAULT_REQUESTS, "killed too late to prove anything"
        pipeline.workers[0].start()  # as a supervisor would
        replies = run.replies()
        outcome = count_on_topic(
            settings,
            client.reply_topic,
            {s.request.request_id for s in run.submissions},
            "kill -9 a worker (1 of 2)",
            run.recovery_s(fault_at),
        )
        assert_serves(client, pipeline)
    assert (outcome.lost, outcome.duplicates) == (0, 0), outcome
    assert all(r is not None and r.result is not None for r in replies), outcome.errors


def test_dispatcher_killed_mid_run(stack: LocalStack) -> None:
    prefix = unique_prefix("kill-dispatcher")
    settings = Settings(topic_prefix=prefix)
    with (
        Pipeline(env=pipeline_env(prefix, **FAST_FAULTS)) as pipeline,
        Client(settings, tenant="faults") as client,
    ):
        run = Run(client, fault_texts(seed=6))
        run.wait_for(FAULT_REQUESTS // 5)
        fault_at = time.monotonic()
        pipeline.dispatcher.kill()
        assert run.answered() < FAULT_REQUESTS, "killed too late to prove anything"
        pipeline.dispatcher.start()
        replies = run.replies()
        outcome = count_on_topic(
            settings,
            client.reply_topic,
            {s.request.request_id for s in run.submissions},
            "kill -9 the dispatcher",
            run.recovery_s(fault_at),
        )
        assert_serves(client, pipeline)
    assert (outcome.lost, outcome.duplicates) == (0, 0), outcome
    assert all(r is not None and r.result is not None for r in replies), outcome.errors
