"""A request the pipeline never saw (here: produced to a topic no dispatcher reads, as if the
broker had lost it) is produced again by the client after client_resend_after_s, and is
answered exactly once; answered requests are not resent."""

from __future__ import annotations

import time
import uuid

import pytest

from headrace.config.settings import Settings
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.messages import Reply
from headrace.transport.kafka import clients as kafka_clients
from tests.integration.topics import read_topic

pytestmark = pytest.mark.timeout(180)


def test_a_lost_request_is_resent_and_answered_once(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    settings = shared_settings.model_copy(update={"client_resend_after_s": 1.0})
    with Client(settings, tenant=f"resend-{uuid.uuid4().hex[:6]}") as client:
        answered = client.submit("answered at once, never resent").result(120)
        assert answered.result is not None
        ((request, _),) = client.prepare(["lost on its way to the dispatcher"])
        lost = client.topics.requests(0)  # a topic no dispatcher reads
        kafka_clients.ensure_topics(settings, [lost], partitions=1)
        submission = client.send(request, bucket=0)
        assert client.topics.requests(0) not in {
            client.topics.requests(b) for b in settings.buckets
        }
        client.flush()
        start = time.monotonic()
        reply = submission.result(120)
        assert reply.result is not None
        assert time.monotonic() - start >= 0.9  # it came from the resend
        assert client.resent == 1
        time.sleep(1.0)
        replies = [
            Reply.model_validate_json(r.value).request_id
            for r in read_topic(settings, client.reply_topic)
        ]
        assert replies.count(request.request_id) == 1
        assert replies.count(answered.request_id) == 1
