"""The dispatcher's answers on a real broker: a pass's error replies to reply topics its
writer has not sent to yet, and its dead letters, go without a metadata wait each (the
dispatcher's loop stalled 100 ms for each new topic, kafka-python learning them one by
one)."""

from __future__ import annotations

import uuid

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.schemas.dead_letters import DeadLetter
from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import RecordRef
from headrace.schemas.topics import Topics
from headrace.transport import open_transport
from headrace.workers.dispatcher.events import Answer
from headrace.workers.dispatcher.io.answers import Answerer
from headrace.workers.ledger import MemoryLedger
from tests.transport.kafka.metadata import refresh, unknown_topic_waits

pytestmark = pytest.mark.timeout(90)


def test_a_pass_of_answers_to_new_reply_topics_waits_for_their_metadata_once(
    stack: LocalStack,
) -> None:
    prefix = f"t-answers-{uuid.uuid4().hex[:8]}"
    topics = Topics(prefix)
    tenants = [f"tenant{i}" for i in range(5)]
    transport = open_transport(Settings(topic_prefix=prefix))
    transport.ensure_topics([topics.replies(t) for t in ["first", *tenants]], partitions=1)
    transport.ensure_topics([topics.dead_letter])
    writer = transport.writer(10)
    answers = Answerer(writer, MemoryLedger(), topics, owner="dispatcher-t")
    try:
        writer.send(topics.replies("first"), b"{}")  # a writer a while up: refreshed since
        writer.flush()
        tracked = [topics.replies("first"), topics.dead_letter]
        assert refresh(writer.producer, tracked), "no refresh: the test shows nothing"
        waited = unknown_topic_waits(writer.producer)
        refs = [RecordRef(topic=f"{prefix}.requests.b16", partition=0, offset=i) for i in range(6)]
        error = ErrorInfo(code=ErrorCode.quota_exceeded, message="over quota")
        actions = [
            Answer(ref=ref, error=error, key=(t, f"r-{t}"), reply_to=topics.replies(t), model="m")
            for ref, t in zip(refs, tenants, strict=False)
        ]
        letter = DeadLetter.of(b"{", source=refs[5], code=ErrorCode.invalid_json, reason="bad")
        actions.append(Answer(ref=refs[5], error=None, dead_letter=letter))

        answers.expect(actions)
        assert all(answers.answer(action) for action in actions)
        done = answers.deliver()

        assert sorted(r.offset for r in done) == list(range(6))
        # one wait at most: the first reply may wait for the refresh that asks for them all
        assert len(waited) <= 1, waited
    finally:
        writer.close()
        transport.close()
