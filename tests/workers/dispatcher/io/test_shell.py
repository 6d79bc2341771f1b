"""The dispatcher's shell on the in-process transport, with the ledger on the machine's real
Redis (127.0.0.1:6379) and a recorder for the batch queue: it carries the core's actions out
(batches, error replies, dead letters, commits), runs reply-topic scans off its poll thread,
and reads cancellations from the control topic."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from prometheus_client import REGISTRY

from headrace.config.settings import Settings
from headrace.schemas.control import Control
from headrace.schemas.dead_letters import DeadLetter
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import (
    Batch,
    Completion,
    EmbeddingResult,
    Reply,
    Request,
)
from headrace.schemas.signing import control_signature
from headrace.schemas.topics import Topics
from headrace.transport.memory import MemoryTransport
from headrace.workers.dispatcher.io.shell import Dispatcher
from headrace.workers.ledger import RedisLedger
from tests.transport.test_contract import Listener

pytestmark = pytest.mark.timeout(60)
MODEL = "all-MiniLM-L6-v2"


class Queue:
    """The batch queue: records what was sent; refuses while ``down``."""

    def __init__(self) -> None:
        self.sent: list[Batch] = []
        self.down = False

    def __call__(self, batch: Batch, queue: str) -> None:
        if self.down:
            raise redis.ConnectionError("the queue is down")
        self.sent.append(batch)


class Rig:
    def __init__(self, **settings: object) -> None:
        self.settings = Settings(
            topic_prefix=f"t-shell-{uuid.uuid4().hex[:8]}",
            worker_heartbeat_s=0.2,
            **settings,  # type: ignore[arg-type]
        )
        self.topics = Topics(self.settings.topic_prefix)
        self.reply_to = self.topics.replies("default")
        self.transport = MemoryTransport()
        self.transport.ensure_topics([self.reply_to])  # as the SDK makes its reply topic
        self.ledger = RedisLedger(redis.Redis(port=6379), self.settings.topic_prefix, 60)
        self.queue = Queue()
        self.dispatcher = Dispatcher(
            self.settings,
            "d1",
            transport=self.transport,
            ledger=self.ledger,
            send_batch=self.queue,
        ).open()
        self.writer = self.transport.writer(1)

    def submit(self, request_id: str, **fields: object) -> Request:
        request = Request(
            request_id=request_id,
            tenant="acme",
            model=MODEL,
            input=f"text {request_id}",
            reply_to=self.reply_to,
            token_count=4,
            **fields,  # type: ignore[arg-type]
        )
        self.writer.send(self.topics.requests(16), request.model_dump_json().encode())
        self.writer.flush()
        return request

    def until(self, done: Callable[[], bool], timeout_s: float = 15) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, "timed out"
            self.ledger.heartbeat("w-live", [16])
            self.dispatcher.step()

    def committed(self) -> int | None:
        return self.transport.broker.committed(
            f"{self.settings.topic_prefix}.dispatcher", (self.topics.requests(16), 0)
        )

    def topic(self, name: str) -> list[bytes]:
        return [r.value for r in self.transport.scan(name)]

    def reply(self, request: Request) -> None:
        """A worker's reply, as it lands on the reply topic."""
        reply = Reply(
            request_id=request.request_id,
            tenant=request.tenant,
            model=MODEL,
            result=EmbeddingResult(embedding=[0.0], token_count=4),
        )
        self.writer.send(self.reply_to, reply.model_dump_json().encode())
        self.writer.flush()


@pytest.fixture
def rig() -> Iterator[Rig]:
    rig = Rig()
    yield rig
    rig.dispatcher.close()


def test_a_request_becomes_a_batch_and_its_offset_is_committed_after_the_completion(
    rig: Rig,
) -> None:
    request = rig.submit("r1")
    rig.until(lambda: len(rig.queue.sent) == 1)
    [batch] = rig.queue.sent
    assert [i.request.request_id for i in batch.items] == [request.request_id]
    assert rig.committed() in (None, 0)
    done = Completion(batch_id=batch.batch_id, done=[batch.items[0].ref])
    rig.ledger.finish_batch([("acme", "r1")], "d1", done)
    rig.until(lambda: rig.committed() == 1)


def test_a_lone_request_leaves_in_the_pass_that_read_it_before_the_rest_of_the_pass(
    rig: Rig,
) -> None:
    """The pass's Redis work (cancellations, completions, heartbeats) comes after the batch
    is sent, not before: it cost a lone request 2 ms."""
    rig.until(lambda: bool(rig.dispatcher.core.live))  # a worker is known to be idle
    order: list[str] = []
    send, take = rig.dispatcher.send_batch, rig.ledger.take_completions

    def sending(batch: Batch, queue: str) -> None:
        order.append("sent")
        send(batch, queue)

    def taking(dispatcher_id: str) -> list[Completion]:
        order.append("completions")
        return take(dispatcher_id)

    poll = rig.dispatcher.reader.poll

    def polling(timeout_ms: int) -> object:
        order.append("poll")  # a pass begins
        return poll(timeout_ms)

    rig.dispatcher.send_batch = sending
    rig.ledger.take_completions = taking  # type: ignore[method-assign]
    rig.dispatcher.reader.poll = polling  # type: ignore[method-assign,assignment]
    rig.submit("r1")
    rig.until(lambda: len(rig.queue.sent) == 1)
    sent = order.index("sent")
    began = max(i for i in range(sent) if order[i] == "poll")  # the pass that read r1
    assert order[began + 1 : sent] == [], "the pass's Redis work came before the batch"


def test_an_expired_request_is_answered_and_a_malformed_one_dead_lettered(rig: Rig) -> None:
    rig.submit("late", deadline=datetime.now(UTC) - timedelta(seconds=1))
    rig.writer.send(rig.topics.requests(16), b"{not json")
    rig.writer.flush()
    rig.until(lambda: rig.committed() == 2)
    [reply] = [Reply.model_validate_json(v) for v in rig.topic(rig.reply_to)]
    assert reply.request_id == "late" and reply.error is not None
    assert reply.error.code is ErrorCode.deadline_exceeded
    [letter] = [DeadLetter.model_validate_json(v) for v in rig.topic(rig.topics.dead_letter)]
    assert letter.code is ErrorCode.invalid_json and letter.original == "{not json"
    assert rig.ledger.holders([("acme", "late")]) == ["answered"]
    assert not rig.queue.sent


def test_a_batch_the_queue_refused_goes_out_once_it_is_back(rig: Rig) -> None:
    rig.queue.down = True
    rig.submit("r1")
    rig.until(lambda: rig.dispatcher.core.stats.batches >= 2)  # tried, refused, tried again
    assert not rig.queue.sent
    rig.queue.down = False
    rig.until(lambda: len(rig.queue.sent) == 1)


def test_a_dead_workers_batch_is_settled_off_the_poll_thread_then_sent_again(rig: Rig) -> None:
    requests = [rig.submit(f"r{i}") for i in range(3)]
    rig.until(lambda: len(rig.queue.sent) == 1)
    [batch] = rig.queue.sent
    # worker w1 took it, was sending r0's reply (which reached the topic), then died
    keys = [("acme", r.request_id) for r in requests]
    rig.ledger.heartbeat("w1", [16])
    rig.ledger.claim(keys, owner=batch.batch_id, lease_ms=60_000, worker_id="w1")
    rig.ledger.begin_send(keys[:1], owner=batch.batch_id, ttl_ms=60_000)
    rig.reply(requests[0])
    rig.until(lambda: len(rig.queue.sent) >= 2)  # w1 is silent past 3 heartbeats
    resent = sorted(i.request.request_id for b in rig.queue.sent[1:] for i in b.items)
    assert resent in (["r1", "r2"], ["r1"], ["r2"])
    rig.until(lambda: len({i.request.request_id for b in rig.queue.sent[1:] for i in b.items}) == 2)
    assert all(b.attempt == 2 for b in rig.queue.sent[1:])
    assert rig.ledger.holders(keys[:1]) == ["answered"]  # found on the topic, marked
    assert rig.ledger.holders(keys[1:]) == [None, None]  # released for the next attempt


def test_a_cancellation_on_the_control_topic_reaches_the_ledger_and_the_core(rig: Rig) -> None:
    control = Control(action="cancel", tenant="acme", request_id="gone")
    rig.writer.send(rig.topics.control, control.model_dump_json().encode())
    rig.writer.flush()
    rig.until(lambda: ("acme", "gone") in rig.dispatcher.core.cancelled)
    assert rig.ledger.cancelled([("acme", "gone")]) == [True]
    rig.submit("gone")
    rig.until(lambda: rig.committed() == 1)
    [reply] = [Reply.model_validate_json(v) for v in rig.topic(rig.reply_to)]
    assert reply.error is not None and reply.error.code is ErrorCode.cancelled
    assert not rig.queue.sent


def test_a_request_longer_than_its_bucket_is_forwarded_with_its_key(rig: Rig) -> None:
    long_text = " ".join(["water to the wheel"] * 10)  # ~42 tokens, on the topic of 16
    request = Request(
        request_id="long", tenant="acme", model=MODEL, input=long_text, reply_to=rig.reply_to
    )
    rig.writer.send(rig.topics.requests(16), request.model_dump_json().encode(), key=b"long")
    rig.writer.flush()
    rig.until(lambda: rig.committed() == 1)  # done here once the copy is acknowledged
    [copy] = list(rig.transport.scan(rig.topics.requests(48)))
    assert (copy.key, Request.model_validate_json(copy.value)) == (b"long", request)
    rig.until(lambda: len(rig.queue.sent) == 1)  # then read from there and batched
    assert [b.bucket for b in rig.queue.sent] == [48]


def test_the_unbucketed_topic_is_read_and_forwarded(rig: Rig) -> None:
    request = Request(
        request_id="plain",
        tenant="acme",
        model=MODEL,
        input="short",
        reply_to=rig.topics.replies(),
    )
    rig.writer.send(rig.topics.ingress, request.model_dump_json().encode(), key=b"plain")
    rig.writer.flush()
    rig.until(lambda: len(list(rig.transport.scan(rig.topics.requests(16)))) == 1)
    rig.until(lambda: len(rig.queue.sent) == 1)  # then read from its bucket and batched
    assert rig.queue.sent[0].items[0].request.request_id == "plain"


def test_each_bucket_exports_its_lag_unread_and_uncommitted(rig: Rig) -> None:
    def lag(kind: str) -> float | None:
        return REGISTRY.get_sample_value(
            "headrace_dispatcher_lag_records", {"bucket": "16", "lane": "online", "kind": kind}
        )

    first = rig.submit("r1")
    rig.until(lambda: len(rig.queue.sent) == 1)
    [batch] = rig.queue.sent
    done = Completion(batch_id=batch.batch_id, done=[batch.items[0].ref])
    rig.ledger.finish_batch([(first.tenant, "r1")], "d1", done)
    rig.until(lambda: rig.committed() == 1)
    rig.submit("r2")
    rig.submit("r3")
    rig.until(lambda: len(rig.queue.sent) >= 2 and lag("uncommitted") == 2)
    assert lag("unread") == 0  # read and batched, not yet answered


def test_a_paused_bucket_stays_paused_when_the_group_hands_its_partitions_back() -> None:
    """A partition comes back from a rebalance unpaused; the shell pauses it again while the
    core holds its bucket back (here: a batch in flight, one formed behind it, and a full
    read-ahead of one batch's worth), and resumes it once the batches are answered."""
    rig = Rig(max_inflight_batches_per_bucket=1, fair_read_ahead_tokens=16, max_batch_tokens=16)
    try:
        rig.submit("r1")
        rig.until(lambda: len(rig.queue.sent) == 1)
        for n in range(2, 22):
            rig.submit(f"r{n}")
        b16 = (rig.topics.requests(16), 0)
        rig.until(lambda: b16 in rig.dispatcher.reader.paused())  # the read-ahead is full
        other = rig.transport.reader(f"{rig.settings.topic_prefix}.dispatcher")
        other.subscribe([b16[0]], Listener())
        rig.until(lambda: b16 not in rig.dispatcher.reader.assignment())
        other.close()
        rig.until(lambda: b16 in rig.dispatcher.reader.assignment())
        assert b16 in rig.dispatcher.reader.paused()
        answered: set[str] = set()

        def answer_what_was_sent() -> bool:
            for batch in rig.queue.sent:
                if batch.batch_id not in answered:
                    answered.add(batch.batch_id)
                    done = Completion(batch_id=batch.batch_id, done=[i.ref for i in batch.items])
                    keys = [(i.request.tenant, i.request.request_id) for i in batch.items]
                    rig.ledger.finish_batch(keys, "d1", done)
            return b16 not in rig.dispatcher.reader.paused()

        rig.until(answer_what_was_sent)
    finally:
        rig.dispatcher.close()


def test_an_error_reply_to_a_topic_that_does_not_exist_is_not_sent(rig: Rig) -> None:
    nowhere = rig.topics.replies("nowhere")
    bad = {"request_id": "x1", "tenant": "acme", "reply_to": nowhere, "input": 5}
    rig.writer.send(rig.topics.requests(16), json.dumps(bad).encode())
    rig.writer.flush()
    rig.until(lambda: len(list(rig.transport.scan(rig.topics.dead_letter))) == 1)
    assert nowhere not in rig.transport.list_topics()  # nothing was written there
    assert rig.dispatcher.answers.refused == 1
    good = rig.submit("r1")  # and the dispatcher goes on
    rig.until(lambda: any(b.items[0].request.request_id == good.request_id for b in rig.queue.sent))


def test_a_signing_tenant_s_unsigned_cancellation_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "acme").write_bytes(b"acme-key")
    rig = Rig(tenant_keys_dir=tmp_path)
    try:
        forged = Control(action="cancel", tenant="acme", request_id="r1")
        signature = control_signature(b"acme-key", "cancel", "acme", "r2")
        real = Control(action="cancel", tenant="acme", request_id="r2", signature=signature)
        for control in (forged, real):
            rig.writer.send(rig.topics.control, control.model_dump_json().encode())
        rig.writer.flush()
        rig.until(lambda: rig.ledger.cancelled([("acme", "r2")]) == [True])
        assert rig.ledger.cancelled([("acme", "r1")]) == [False]
    finally:
        rig.dispatcher.close()
