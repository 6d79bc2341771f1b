"""The client on the in-process transport: what it produces, how it awaits, when it resends.
A test plays the pipeline by reading the request topics and writing replies."""

from __future__ import annotations

import time

import pytest

from headrace.config.settings import Settings
from headrace.producers.client import Client
from headrace.schemas.errors import BackpressureError
from headrace.schemas.messages import Control, EmbeddingResult, Reply, Request
from headrace.schemas.topics import Topics
from headrace.transport.memory import MemoryTransport

pytestmark = pytest.mark.timeout(30)


def requests_on(transport: MemoryTransport, topic: str) -> list[Request]:
    return [Request.model_validate_json(r.value) for r in transport.scan(topic)]


def answer(transport: MemoryTransport, request: Request) -> None:
    reply = Reply(
        request_id=request.request_id,
        tenant=request.tenant,
        model=request.model,
        result=EmbeddingResult(embedding=[1.0, 0.0], token_count=3),
    )
    writer = transport.writer(1)
    writer.send(request.reply_to, reply.model_dump_json().encode())
    writer.flush()


def test_a_request_goes_to_its_bucket_topic_and_its_reply_resolves_the_future() -> None:
    transport = MemoryTransport()
    settings = Settings(topic_prefix="c")
    with Client(settings, tenant="acme", transport=transport) as client:
        submission = client.submit("a short text")
        assert submission.bucket == 16
        [request] = requests_on(transport, Topics("c").requests(16))
        [record] = list(transport.scan(Topics("c").requests(16)))
        assert record.key == request.request_id.encode()
        assert (request.tenant, request.reply_to) == ("acme", "c.replies.default")
        assert request.token_count == submission.request.token_count
        answer(transport, request)
        reply = submission.result(5)
        assert reply.result is not None and client.pending == 0


def test_past_client_max_pending_a_send_raises_backpressure() -> None:
    transport = MemoryTransport()
    settings = Settings(topic_prefix="c", client_max_pending=1, client_on_full="raise")
    with Client(settings, transport=transport) as client:
        first = client.submit("one")
        with pytest.raises(BackpressureError):
            client.submit("two")
        answer(transport, first.request)
        first.result(5)
        client.submit("three")  # a slot came free


def test_cancel_writes_a_control_record() -> None:
    transport = MemoryTransport()
    with Client(Settings(topic_prefix="c"), tenant="acme", transport=transport) as client:
        client.cancel("r1")
    [record] = list(transport.scan(Topics("c").control))
    control = Control.model_validate_json(record.value)
    assert (control.action, control.tenant, control.request_id) == ("cancel", "acme", "r1")


def test_against_tansu_an_unanswered_request_is_sent_again_but_not_against_kafka() -> None:
    for flavor, copies in (("tansu", 2), ("kafka", 1)):
        transport = MemoryTransport()
        settings = Settings(
            topic_prefix="c",
            broker_flavor=flavor,  # type: ignore[arg-type]
            client_resend_after_s=0.2,
            client_max_resends=1,
        )
        with Client(settings, transport=transport) as client:
            submission = client.submit("lost on its way")
            time.sleep(1.0)  # the resender looks every 0.5 s
            sent = requests_on(transport, Topics("c").requests(16))
            assert len(sent) == copies, flavor
            assert {r.request_id for r in sent} == {submission.request.request_id}
