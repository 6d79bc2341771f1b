"""In-flight coalescing through the whole pipeline (tansu, Redis, a real worker): identical
requests sent at once are computed once and each is answered once under its own id; a worker
that dies computing the one they wait on leaves them to be answered, each once, by the
next."""

from __future__ import annotations

import collections
import uuid

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.messages import Reply, Request
from headrace.schemas.topics import Topics
from headrace.workers.faults import CRASH_EXIT_CODE
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.faults.harness import FAST_FAULTS, count_on_topic
from tests.integration.topics import read_topic

pytestmark = pytest.mark.timeout(300)

CRASH = "<<crash>>"


def computed(replies: list[Reply]) -> int:
    """Replies a worker computed (the others were answered with a result computed for an
    identical request: no batch, the cache tier it was read from)."""
    return sum(r.batch is not None for r in replies)


def produced(settings: Settings, ids: set[str]) -> collections.Counter[str]:
    """Records on the request topics for each of ``ids``."""
    topics = Topics(settings.topic_prefix)
    counts: collections.Counter[str] = collections.Counter()
    for bucket in settings.buckets:
        for record in read_topic(settings, topics.requests(bucket)):
            request = Request.model_validate_json(record.value)
            if request.request_id in ids:
                counts[request.request_id] += 1
    return counts


def test_fifty_identical_requests_at_once_are_computed_once_and_answered_once_each(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    settings = shared_settings.model_copy(update={"cache_enabled": True})
    text = f"one sentence sent fifty times at once {uuid.uuid4().hex[:8]}"
    tenant = f"coalesce-{uuid.uuid4().hex[:6]}"
    with (
        Client(settings, tenant=tenant) as client,
        Client(settings, tenant=f"{tenant}-b") as other,
    ):
        submissions = client.submit_many([text] * 50)
        theirs = other.submit_many([text] * 5)  # another tenant's are its own computation
        replies = [s.result(120) for s in submissions]
        their_replies = [s.result(120) for s in theirs]
        ids = {s.request.request_id for s in submissions}
        # one submit_many looks the text up once, before any copy is sent: all 50 are sent,
        # however soon the first is answered
        sent = produced(settings, ids)
        outcome = count_on_topic(
            settings, client.reply_topic, set(sent), "coalesced", 0.0, tenant=tenant, add_row=False
        )
    assert max(sent.values()) == 1 and len(sent) == 50, sent
    outcome.assert_clean()  # each request sent is answered on the topic, once
    assert [r.request_id for r in replies] == [s.request.request_id for s in submissions]
    assert computed(replies) == 1, [(r.batch, r.cache_tier) for r in replies]
    assert all(r.cache_tier is not None for r in replies if r.batch is None)
    assert all(r.result == replies[0].result for r in replies)
    assert computed(their_replies) == 1 and all(r.tenant == f"{tenant}-b" for r in their_replies)


@pytest.mark.slow
def test_a_worker_dying_mid_computation_leaves_its_waiters_answered_once(
    stack: LocalStack,
) -> None:
    prefix = unique_prefix("coalesce-crash")
    settings = Settings(topic_prefix=prefix, cache_enabled=True)
    with (
        Pipeline(env=pipeline_env(prefix, **FAST_FAULTS), worker_buckets=[]) as pipeline,
        Client(settings, tenant="coalesce") as client,
    ):
        crashing = pipeline.add_worker("all", env={"HEADRACE_FAULT_CRASH_MARKER": CRASH})
        text = f"the sentence whose worker dies computing it {CRASH}"
        submissions = client.submit_many([text] * 30)
        eventually(lambda: crashing.exit_code() is not None, 60, "the worker's crash")
        # the fault landed with every request in flight: none was answered
        assert crashing.exit_code() == CRASH_EXIT_CODE
        assert not any(s.future.done() for s in submissions)
        pipeline.add_worker("all")  # a healthy one, as a supervisor would start
        replies = [s.result(180) for s in submissions]
        outcome = count_on_topic(
            settings,
            client.reply_topic,
            {s.request.request_id for s in submissions},
            "coalesced, worker crashed",
            0.0,
            tenant="coalesce",
            add_row=False,
        )
        # none was answered before the crash: every one was sent, and answered on its topic
    outcome.assert_clean()
    assert all(r.result is not None for r in replies), [r.error for r in replies]
    assert computed(replies) == 1, [(r.batch, r.cache_tier) for r in replies]
