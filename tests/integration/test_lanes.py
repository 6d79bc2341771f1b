"""Online before bulk on the real pipeline: with a bulk backlog in flight on one worker,
online requests are answered while most of the bulk work still waits, and every bulk
request is still answered exactly once (counted on its reply topic)."""

from __future__ import annotations

import collections

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.messages import Reply
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.integration.topics import read_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
BULK = 1500


def test_online_requests_overtake_a_bulk_backlog(stack: LocalStack) -> None:
    prefix = unique_prefix("lanes")
    env = pipeline_env(prefix, HEADRACE_MAX_BATCH_TOKENS="256")
    settings = Settings(topic_prefix=prefix, max_batch_tokens=256)
    with (
        Pipeline(env=env) as pipeline,
        Client(settings, tenant="jobs", lane="bulk", reply_topic=f"{prefix}.replies.bulk") as bulk,
        Client(settings, tenant="users") as online,
    ):
        texts = [f"bulk line {i} " + "about the river " * (i % 6) for i in range(BULK)]
        backlog = bulk.submit_many(texts)
        eventually(lambda: sum(s.future.done() for s in backlog) >= 20, 120, "bulk flowing")
        waiting_at_online = []
        for i in range(5):
            reply = online.submit(f"an online question {i}").result(60)
            assert reply.result is not None, reply.error
            waiting_at_online.append(sum(not s.future.done() for s in backlog))
        print("bulk still waiting as each online reply came:", waiting_at_online)
        assert min(waiting_at_online) > BULK // 3, waiting_at_online  # it did not wait for bulk
        replies = [s.result(240) for s in backlog]
        assert all(r.result is not None for r in replies)
        assert all(p.alive() for p in [pipeline.dispatcher, *pipeline.workers])
    on_topic = collections.Counter(
        Reply.model_validate_json(r.value).request_id
        for r in read_topic(settings, f"{prefix}.replies.bulk")
    )
    assert set(on_topic) == {s.request.request_id for s in backlog}
    assert set(on_topic.values()) == {1}  # once each
