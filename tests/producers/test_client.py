"""The client on the in-process transport: what it produces, how it awaits, when it resends.
A test plays the pipeline by reading the request topics and writing replies."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from headrace.config.settings import Settings
from headrace.models import tiny_lm
from headrace.producers.client import Client, record_key
from headrace.producers.config import ClientConfig
from headrace.producers.submission import Submission
from headrace.schemas.control import Control
from headrace.schemas.errors import BackpressureError, InvalidRequestError, ReplyTimeoutError
from headrace.schemas.messages import CacheDirective, EmbeddingResult, Reply, Request
from headrace.schemas.signing import control_signature, request_signature
from headrace.schemas.topics import Topics
from headrace.transport import BROKER_GUARANTEES
from headrace.transport.memory import MemoryTransport
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(30)
LM = tiny_lm.NAME  # a generation model the registry knows


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


def test_the_clients_config_governs_it_not_the_settings_it_opens_connections_with() -> None:
    """The gateway's way: settings that block, a config that raises at once."""
    transport = MemoryTransport()
    settings = Settings(topic_prefix="c", client_max_pending=10_000, client_on_full="block")
    config = ClientConfig.of(settings, max_pending=1, on_full="raise", buckets=(16, 32))
    with Client(settings, transport=transport, config=config) as client:
        client.submit("one")
        with pytest.raises(BackpressureError, match="1 requests await replies"):
            client.submit("two")
        assert client.config.buckets == (16, 32) and client.for_tenant("b").config is config


def test_cancel_writes_a_control_record() -> None:
    transport = MemoryTransport()
    with Client(Settings(topic_prefix="c"), tenant="acme", transport=transport) as client:
        client.cancel("r1")
    [record] = list(transport.scan(Topics("c").control))
    control = Control.model_validate_json(record.value)
    assert (control.action, control.tenant, control.request_id) == ("cancel", "acme", "r1")


def test_an_unanswered_request_is_sent_again_only_where_the_broker_may_lose_it() -> None:
    for flavor, copies in (("tansu", 2), ("kafka", 1)):
        # the transport says what its broker promises; the client asks it, not the flavor
        transport = MemoryTransport(guarantees=BROKER_GUARANTEES[flavor])
        settings = Settings(topic_prefix="c", client_resend_after_s=0.2, client_max_resends=1)
        with Client(settings, transport=transport) as client:
            submission = client.submit("lost on its way")
            time.sleep(1.0)  # the resender looks every 0.5 s
            sent = requests_on(transport, Topics("c").requests(16))
            assert len(sent) == copies, flavor
            assert {r.request_id for r in sent} == {submission.request.request_id}


def cancelled_ids(transport: MemoryTransport) -> list[str]:
    return [
        Control.model_validate_json(r.value).request_id for r in transport.scan(Topics("c").control)
    ]


def test_an_abandoned_request_frees_its_slot_and_is_cancelled() -> None:
    transport = MemoryTransport()
    settings = Settings(topic_prefix="c", client_max_pending=1, client_on_full="raise")
    with Client(settings, tenant="acme", transport=transport) as client:
        first = client.submit("one")
        with pytest.raises(BackpressureError):
            client.submit("two")
        client.abandon([first.request.request_id])
        assert client.pending == 0
        client.submit("three")  # its slot came free without a reply
        answer(transport, first.request)  # a late reply is dropped
    assert cancelled_ids(transport) == [first.request.request_id]


def test_a_generation_that_times_out_is_abandoned() -> None:
    transport = MemoryTransport()
    settings = Settings(topic_prefix="c", client_max_pending=1, client_on_full="raise")
    with Client(settings, tenant="acme", transport=transport) as client:
        with pytest.raises(ReplyTimeoutError):
            client.generate("hello", model=LM, wait_s=0.2, request_id="slow-1")
        assert client.pending == 0
    assert cancelled_ids(transport) == ["slow-1"]


def test_a_stream_whose_reader_goes_away_is_abandoned() -> None:
    transport = MemoryTransport()
    settings = Settings(topic_prefix="c", client_max_pending=1, client_on_full="raise")

    async def read_then_leave(client: Client) -> None:
        events = client.stream_events("hello", model=LM, wait_s=60, request_id="gone-1")
        with pytest.raises(TimeoutError):  # no delta comes: the reader stops waiting
            await asyncio.wait_for(anext(events), 0.5)
        await events.aclose()

    with Client(settings, tenant="acme", transport=transport) as client:
        asyncio.run(read_then_leave(client))
        eventually(lambda: client.pending == 0, 5, "nothing pending")
        assert cancelled_ids(transport) == ["gone-1"]


def test_a_stream_whose_reader_leaves_while_its_request_is_produced_is_abandoned_once_out() -> None:
    """The reader gives up while its request is still being produced (held here; a slow
    broker or a first use of the tokenizer in real life): once the request is out it is
    abandoned, its place freed and a cancel sent, not left awaited forever."""
    transport = MemoryTransport()
    settings = Settings(topic_prefix="c", client_max_pending=1, client_on_full="raise")
    producing, release = threading.Event(), threading.Event()
    with Client(settings, tenant="acme", transport=transport) as client:
        submit = client._submit_generation

        def held(*args: Any) -> Submission:
            producing.set()
            release.wait(10)
            return submit(*args)

        client._submit_generation = held  # type: ignore[method-assign]

        async def leave_while_producing() -> None:
            events = client.stream_events("hello", model=LM, wait_s=60, request_id="gone-2")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(anext(events), 0.5)
            await events.aclose()
            assert producing.is_set() and client.pending == 0, "not left while producing"
            release.set()

        asyncio.run(leave_while_producing())
        eventually(lambda: cancelled_ids(transport) == ["gone-2"], 5, "the cancel")
        assert client.pending == 0
        client.submit("the place is free again")


def test_a_tenant_with_a_key_signs_its_requests_and_cancellations(tmp_path: Path) -> None:
    (tmp_path / "acme").write_bytes(b"acme-key\n")
    transport = MemoryTransport()
    settings = Settings(topic_prefix="c", tenant_keys_dir=tmp_path)
    with Client(settings, tenant="acme", transport=transport) as client:
        submission = client.submit("a signed text")
        client.cancel(submission.request.request_id)
    [request] = requests_on(transport, Topics("c").requests(16))
    assert request.signature == request_signature(b"acme-key", request.signable())
    assert request.signature != request_signature(
        b"acme-key", request.model_copy(update={"input": "another text"}).signable()
    )
    [record] = list(transport.scan(Topics("c").control))
    control = Control.model_validate_json(record.value)
    assert control.signature == control_signature(b"acme-key", "cancel", "acme", request.request_id)
    with Client(settings, tenant="globex", transport=MemoryTransport()) as other:
        assert other.submit("no key, no signature").request.signature is None


def test_tenant_views_share_one_listener_and_keep_their_own_name_key_and_slots(
    tmp_path: Path,
) -> None:
    (tmp_path / "globex").write_bytes(b"globex-key\n")
    transport = MemoryTransport()
    settings = Settings(
        topic_prefix="c", tenant_keys_dir=tmp_path, client_max_pending=1, client_on_full="raise"
    )
    with Client(settings, tenant="acme", transport=transport) as client:
        globex = client.for_tenant("globex")
        assert client.for_tenant("globex") is globex and client.for_tenant("acme") is client
        first = client.submit("from acme")
        with pytest.raises(BackpressureError):  # acme is at its cap ...
            client.submit("acme again")
        second = globex.submit("from globex")  # ... globex is not
        requests = requests_on(transport, Topics("c").requests(16))
        assert [r.tenant for r in requests] == ["acme", "globex"]
        assert requests[0].signature is None
        assert requests[1].signature == request_signature(b"globex-key", requests[1].signable())
        for request in requests:
            answer(transport, request)
        assert first.result(5).tenant == "acme" and second.result(5).tenant == "globex"
        assert client.replies_read == 2  # each reply parsed once, not once per tenant
        globex.close()  # a view owns nothing: the client still works
        third = globex.submit("globex again")
        answer(transport, third.request)
        assert third.result(5).tenant == "globex"


def test_a_logit_bias_on_a_token_the_model_has_not_is_refused_before_it_is_sent() -> None:
    transport = MemoryTransport()
    with Client(Settings(topic_prefix="c"), transport=transport) as client:
        with pytest.raises(InvalidRequestError, match="logit_bias: token id 99999999"):
            client.submit_generation("hi", model=LM, logit_bias={"99999999": 5})
        client.submit_generation("hi", model=LM, logit_bias={"5": 5}, presence_penalty=1)
    [request] = [
        r for t in transport.list_topics() if ".requests." in t for r in requests_on(transport, t)
    ]
    assert request.params.logit_bias == ((5, 5.0),)  # type: ignore[union-attr]


def test_a_batch_request_rides_the_bulk_lane_and_the_others_the_client_s_own() -> None:
    transport = MemoryTransport()
    with Client(Settings(topic_prefix="c"), tenant="acme", transport=transport) as client:
        client.submit("later is fine", priority="batch")
        client.submit("first to go", priority="sheddable")
        client.submit_generation("hi", model=LM, priority="batch")
    topics = Topics("c")
    bulk = requests_on(transport, topics.requests(16, "bulk"))
    online = requests_on(transport, topics.requests(16))
    assert sorted(r.priority for r in bulk) == ["batch", "batch"]
    assert [r.priority for r in online] == ["sheddable"]


def test_a_record_is_keyed_by_its_content_where_its_result_may_serve_an_identical_one() -> None:
    """Identical cacheable requests meet in one partition (one dispatcher coalesces them);
    any other request is keyed by its id."""

    def request(request_id: str, **fields: object) -> Request:
        base: dict[str, object] = {
            "tenant": "acme",
            "model": "m",
            "input": "a text",
            "reply_to": "t.replies.default",
            "cache": CacheDirective(),
        }
        return Request.model_validate({"request_id": request_id, **base, **fields})

    a, b = record_key(request("r1")), record_key(request("r2"))
    assert a == b and a != b"r1"
    assert record_key(request("r3", tenant="other")) != a  # never across tenants
    assert record_key(request("r4", input="another text")) != a
    assert record_key(request("r5", cache=None)) == b"r5"  # its client reads no cache
    sampled = {"task": "generate", "params": {"temperature": 0.8}}
    assert record_key(request("r6", **sampled)) == b"r6"  # would not repeat
