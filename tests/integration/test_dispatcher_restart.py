"""Kill -9 the dispatcher in the middle of 500 requests and start it again: every request is
answered, each exactly once (counted on the reply topic)."""

from __future__ import annotations

import collections
import json
import time

import pytest

from bench.texts import long_tail_texts
from producers.client import Client
from runtime.localstack import LocalStack
from runtime.processes import Pipeline
from runtime.settings import Settings
from tests.conftest import pipeline_env, unique_prefix
from tests.integration.topics import read_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_dispatcher_killed_mid_run_loses_nothing_and_answers_once(stack: LocalStack) -> None:
    prefix = unique_prefix("restart")
    settings = Settings(topic_prefix=prefix)
    texts = [t[:400] for t in long_tail_texts(500, seed=11)]
    with (
        Pipeline(env=pipeline_env(prefix)) as pipeline,
        Client(settings, tenant="faults") as client,
    ):
        submissions = client.submit_many(texts)
        deadline = time.monotonic() + 120
        while sum(s.future.done() for s in submissions) < 60:
            assert time.monotonic() < deadline, "no progress before the kill"
            time.sleep(0.05)
        pipeline.dispatcher.kill()
        answered_at_kill = sum(s.future.done() for s in submissions)
        assert answered_at_kill < len(submissions), "killed too late to prove anything"
        pipeline.dispatcher.start()
        replies = [s.result(300) for s in submissions]
    assert all(r.result is not None for r in replies)
    time.sleep(1)
    counts = collections.Counter(
        json.loads(r.value)["request_id"] for r in read_topic(settings, client.reply_topic)
    )
    ids = {s.request.request_id for s in submissions}
    assert set(counts) == ids  # none lost
    assert max(counts.values()) == 1  # none answered twice
