"""A request the pipeline never saw (here: produced to a topic no dispatcher reads, as if the
broker had lost it) is produced again by the client after client_resend_after_s, and is
answered exactly once; answered requests are not resent. A reply the broker lost after
acknowledging it is answered again when the request is resent."""

from __future__ import annotations

import time
import uuid

import pytest

from headrace.config.settings import Settings
from headrace.connections import redis_client
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.messages import Reply
from headrace.transport.kafka import clients as kafka_clients
from headrace.workers.ledger import RedisLedger, ReplyAt
from tests.eventually import eventually
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


def test_a_reply_the_broker_lost_after_acknowledging_it_is_answered_again(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    """The ledger has the request answered and knows where its reply landed; when that
    record is not there (tansu has lost acknowledged writes), a resend is answered again.
    The loss is made by pointing the ledger's record past the topic's end."""
    ledger = RedisLedger(redis_client(shared_settings), shared_settings.topic_prefix, 3600)
    with Client(shared_settings, tenant=f"lost-{uuid.uuid4().hex[:6]}") as client:
        ((request, bucket), (kept, kept_bucket)) = client.prepare(
            ["its reply will be lost", "its reply stays"]
        )
        first = client.send(request, bucket).result(120)
        client.send(kept, kept_bucket).result(120)
        key, kept_key = (client.tenant, request.request_id), (client.tenant, kept.request_id)
        # the worker records where a reply landed once the broker acknowledged it: the reply
        # itself can reach the client first
        eventually(lambda: None not in ledger.replies_at([key, kept_key]), 30, "replies recorded")
        [at, kept_at] = ledger.replies_at([key, kept_key])
        assert at is not None and kept_at is not None and at.topic == client.reply_topic
        on_topic = [r for r in read_topic(shared_settings, at.topic) if r.offset == at.offset]
        assert Reply.model_validate_json(on_topic[0].value).request_id == request.request_id
        ledger.redis.set(ledger.keys.reply_at(*key), ReplyAt(at.topic, 0, 10**9).encode())
        client.send_nowait(request, bucket)  # the requester's resend, for both
        client.send_nowait(kept, kept_bucket)
        client.flush()
        deadline = time.monotonic() + 60
        while (again := ledger.replies_at([key])[0]) is None or again.offset == 10**9:
            assert time.monotonic() < deadline, "the lost reply was not answered again"
            time.sleep(0.2)
        time.sleep(2.0)  # the kept one's resend is through too by now
        replies = [
            Reply.model_validate_json(r.value).request_id
            for r in read_topic(shared_settings, client.reply_topic)
        ]
    assert replies.count(request.request_id) == 2  # answered again: the first "was lost"
    assert replies.count(kept.request_id) == 1  # its reply is where it was: not again
    assert again.offset > at.offset and first.result is not None
