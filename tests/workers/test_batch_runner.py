"""One batch on a worker with the real model: out-of-memory splits the batch, a poison item
fails alone, cancelled and answered requests are handled by their claim state, and the
completion says what happened. The batch rules run on the in-memory ledger and transport
(their contract tests hold them to Redis and Kafka); the rest on the real ones."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
import torch

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Batch, Completion, EmbeddingResult, Reply
from headrace.schemas.topics import Topics
from headrace.transport import open_transport
from headrace.transport.base import Delivered
from headrace.transport.memory import MemoryTransport
from headrace.workers.backends import EmbeddingBackend
from headrace.workers.backends.base import EncodedItem
from headrace.workers.batch_context import BatchContext
from headrace.workers.batch_runner import run_batch
from headrace.workers.faults import FaultyBackend
from headrace.workers.ledger import ClaimState, MemoryLedger, RedisLedger
from headrace.workers.reply_sink import TopicReplySink
from tests.eventually import eventually
from tests.models.loaded import loaded_minilm
from tests.transport.kafka.metadata import knows, refresh, unknown_topic_waits
from tests.workers.batches import make_batch, memory_sink, runner_sink

MODEL = "all-MiniLM-L6-v2"


class SmallMemory(FaultyBackend):
    """Runs out of memory on any batch of more than ``rows`` rows, as a full GPU would."""

    def __init__(self, inner: EmbeddingBackend, rows: int) -> None:
        super().__init__(inner, poison="<<poison>>")
        self.rows = rows
        self.batch_sizes: list[int] = []

    def embed(
        self, items: list[EncodedItem], normalize: list[bool]
    ) -> tuple[list[list[float]], int, int]:
        self.batch_sizes.append(len(items))
        if len(items) > self.rows:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return super().embed(items, normalize)


def replies_by_id(transport: MemoryTransport, batch: Batch) -> dict[str, Reply]:
    """What the batch's reply topic holds, by request id."""
    records = transport.scan(batch.items[0].request.reply_to)
    return {r.request_id: r for r in (Reply.model_validate_json(x.value) for x in records)}


@pytest.fixture(scope="module")
def backend() -> EmbeddingBackend:
    return loaded_minilm()


def test_oom_splits_poison_fails_alone_cancelled_and_answered_are_respected(
    backend: EmbeddingBackend,
) -> None:
    prefix = "t-runner"
    settings = Settings(topic_prefix=prefix)
    ledger = MemoryLedger()
    sink, transport = memory_sink(settings)
    model = SmallMemory(backend, rows=2)
    ctx = BatchContext(
        backend=model,
        ledger=ledger,
        sink=sink,
        worker_id="w",
    )
    texts = [f"sentence number {i}" for i in range(8)]
    texts[5] = "this one is <<poison>>"
    batch = make_batch(prefix, texts, MODEL)
    keys = [(i.request.tenant, i.request.request_id) for i in batch.items]
    ledger.cancel(*keys[1])
    ledger.mark_answered([keys[2]])

    completion = run_batch(batch, ctx)

    replies = replies_by_id(transport, batch)
    ids = [k[1] for k in keys]
    assert ids[2] not in replies  # answered before: no second reply
    assert replies[ids[1]].error is not None and replies[ids[1]].error.code is ErrorCode.cancelled
    assert replies[ids[5]].error is not None and replies[ids[5]].error.code is ErrorCode.model_error
    for i in (0, 3, 4, 6, 7):
        result = replies[ids[i]].result
        assert result is not None and len(result.embedding) == 384
        assert replies[ids[i]].batch is not None and replies[ids[i]].batch.size <= 2
    assert model.batch_sizes[0] == 6  # the six to compute, all at once first
    assert max(s for s in model.batch_sizes if s <= 2) <= 2
    assert len(completion.done) == 8 and completion.failed == 1 and not completion.deferred
    assert ledger.runners([batch.batch_id]) == [None]  # finished: no longer running
    assert set(ledger.claim(keys, "again", 1000)) == {ClaimState.answered}  # redelivery: silent


class ClaimAfterCompute(MemoryLedger):
    """A ledger whose claim answers only once the model has started on the batch: a batch
    that claims before it computes waits ``patience_s`` and finds the claim refused."""

    def __init__(self, computing: threading.Event, patience_s: float = 5.0) -> None:
        super().__init__()
        self.computing = computing
        self.patience_s = patience_s

    def claim(
        self, ids: list[tuple[str, str]], owner: str, lease_ms: int, worker_id: str | None = None
    ) -> list[ClaimState]:
        if not self.computing.wait(self.patience_s):
            raise ConnectionError("claimed before the model started: not beside it")
        return super().claim(ids, owner, lease_ms, worker_id)


class Computing(FaultyBackend):
    def __init__(self, inner: EmbeddingBackend, computing: threading.Event) -> None:
        super().__init__(inner)
        self.computing = computing

    def embed(
        self, items: list[EncodedItem], normalize: list[bool]
    ) -> tuple[list[list[float]], int, int]:
        self.computing.set()
        return super().embed(items, normalize)


def test_a_first_attempt_claims_beside_its_compute_and_sends_only_what_it_claimed(
    backend: EmbeddingBackend,
) -> None:
    """The claim runs while the model computes (this ledger answers only then), and what it
    says still decides what is sent: answered requests get no second reply, a cancelled one
    its error, one another attempt holds is deferred; a second attempt claims first."""
    prefix = "t-beside"
    settings = Settings(topic_prefix=prefix)
    computing = threading.Event()
    ledger = ClaimAfterCompute(computing)
    sink, transport = memory_sink(settings)
    with ThreadPoolExecutor(max_workers=1) as beside:
        ctx = BatchContext(
            backend=Computing(backend, computing),
            ledger=ledger,
            sink=sink,
            worker_id="w",
            claim_beside=beside,
        )
        batch = make_batch(prefix, [f"sentence number {i}" for i in range(5)], MODEL)
        keys = [(i.request.tenant, i.request.request_id) for i in batch.items]
        ledger.cancel(*keys[1])
        ledger.mark_answered([keys[2]])
        held = MemoryLedger.claim(ledger, [keys[3]], "another attempt", 60_000)
        assert held == [ClaimState.fresh]

        completion = run_batch(batch, ctx)

        replies = replies_by_id(transport, batch)
        assert set(replies) == {keys[0][1], keys[1][1], keys[4][1]}
        assert replies[keys[1][1]].error is not None
        assert replies[keys[1][1]].error.code is ErrorCode.cancelled
        for i in (0, 4):
            result = replies[keys[i][1]].result
            assert isinstance(result, EmbeddingResult) and len(result.embedding) == 384
        assert [ref.offset for ref in completion.deferred] == [batch.items[3].ref.offset]
        assert len(completion.done) == 4

        computing.clear()  # a second attempt claims before it computes: it would wait
        ledger.patience_s = 0.2
        again = make_batch(prefix, ["one more sentence"], MODEL).model_copy(update={"attempt": 2})
        with pytest.raises(ConnectionError):
            run_batch(again, ctx)


def test_each_reply_carries_its_share_of_the_batch_device_time(
    backend: EmbeddingBackend,
) -> None:
    prefix = "t-cost"
    settings = Settings(topic_prefix=prefix)
    sink, transport = memory_sink(settings)
    ctx = BatchContext(backend=backend, ledger=MemoryLedger(), sink=sink, worker_id="w")
    texts = ["short", "a somewhat longer sentence than the first", "mid length one"]
    batch = make_batch(prefix, texts, MODEL)

    completion = run_batch(batch, ctx)

    replies = [
        Reply.model_validate_json(x.value) for x in transport.scan(batch.items[0].request.reply_to)
    ]
    costs = [r.cost for r in replies if r.cost is not None]
    assert len(costs) == 3
    info = replies[0].batch
    assert info is not None and info.padded_tokens == sum(c.padded_tokens for c in costs)
    assert sorted(c.tokens for c in costs) == sorted(
        r.result.token_count
        for r in replies
        if r.result is not None  # type: ignore[union-attr]
    )
    # split by padded tokens: every row is padded to the longest, so the shares are equal
    assert all(c.device_ms == pytest.approx(costs[0].device_ms) for c in costs)
    assert replies[0].timings is not None
    assert sum(c.device_ms for c in costs) == pytest.approx(replies[0].timings.compute_ms)
    assert (completion.computed, completion.padded_tokens) == (3, info.padded_tokens)
    assert completion.compute_ms >= replies[0].timings.compute_ms > 0


class Recorded(TopicReplySink):
    """A reply sink that writes ``send`` and ``flush`` in ``events`` as they happen."""

    def __init__(self, transport: MemoryTransport, settings: Settings, events: list[str]) -> None:
        super().__init__(transport, settings)
        self.events = events

    def send(self, topic: str, reply: Any, headers: Any = ()) -> None:
        self.events.append("send")
        super().send(topic, reply, headers)

    def push(self) -> None:
        self.events.append("push")
        super().push()

    def flush(self) -> list[Delivered]:
        self.events.append("flush")
        return super().flush()


def test_a_batch_says_its_replies_are_sent_before_the_ledger_marks_them(
    backend: EmbeddingBackend,
) -> None:
    """``replies_sent`` (the hand-off desk's cue that the worker is idle) comes once, once
    the last replies are pushed to the broker (sent now, not at the linger: a round trip
    before that delayed every reply) and while the broker acknowledges them (after the
    acknowledgement, a requester answered by them could send its next request first), before
    the ledger's mark."""
    prefix = "t-sent"
    settings = Settings(topic_prefix=prefix)
    _, transport = memory_sink(settings)
    events: list[str] = []
    ledger = MemoryLedger()
    batch = make_batch(prefix, ["one", "two", "three"], MODEL)
    ids = [(i.request.tenant, i.request.request_id) for i in batch.items]

    def sent() -> None:
        answered = ledger.claim(ids, owner="other", lease_ms=1, worker_id="x")
        events.append("sent:" + ",".join(sorted({state.name for state in answered})))

    ctx = BatchContext(
        backend=backend,
        ledger=ledger,
        sink=Recorded(transport, settings, events),
        worker_id="w",
        replies_sent=sent,
    )
    completion = run_batch(batch, ctx)
    assert events == ["send", "send", "send", "push", "sent:busy", "flush"]
    assert len(completion.done) == 3


class Turns(FaultyBackend):
    """Counts the batches inside the model at once; ``entered`` is set once a second batch
    has entered it."""

    def __init__(self, inner: EmbeddingBackend) -> None:
        super().__init__(inner)
        self.inside = self.most_inside = self.calls = 0
        self.entered = threading.Event()

    def embed(
        self, items: list[EncodedItem], normalize: list[bool]
    ) -> tuple[list[list[float]], int, int]:
        self.calls += 1
        self.inside += 1
        self.most_inside = max(self.most_inside, self.inside)
        if self.calls == 2:
            self.entered.set()
        try:
            return super().embed(items, normalize)
        finally:
            self.inside -= 1


class HeldFlush(TopicReplySink):
    """A reply sink whose flush first waits (up to 30 s) for ``until``; ``released`` says
    whether it came."""

    def __init__(self, settings: Settings, until: threading.Event) -> None:
        super().__init__(open_transport(settings), settings)
        self.until = until
        self.released: bool | None = None

    def flush(self) -> list[Delivered]:
        self.released = self.until.wait(30)
        return super().flush()


def test_batches_take_turns_at_the_model_and_one_delivers_while_the_next_computes(
    stack: LocalStack, backend: EmbeddingBackend
) -> None:
    """The first batch computes, then its reply flush waits until the second batch is
    inside the model: were delivery part of the model's turn, the second could not enter
    (the flush would give up waiting after 30 s)."""
    prefix = f"t-turns-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    model = Turns(backend)
    shared = BatchContext(
        backend=model,
        ledger=RedisLedger(connections.redis_client(settings), prefix, 60),
        sink=runner_sink(settings),
        worker_id="w",
        model_turn=threading.Lock(),
    )
    held = HeldFlush(settings, until=model.entered)
    first = make_batch(prefix, ["the first batch, one", "the first batch, two"], MODEL)
    second = make_batch(prefix, ["the second batch"], MODEL)
    done: dict[str, Completion] = {}

    def run_first() -> None:
        done["first"] = run_batch(first, replace(shared, sink=held))

    runner = threading.Thread(target=run_first)
    runner.start()
    eventually(lambda: model.calls > 0, 30, "the first batch's turn", every_s=0.005)
    done["second"] = run_batch(second, shared)
    runner.join(60)
    assert held.released is True  # the second batch computed while the first delivered
    assert model.most_inside == 1  # never two batches in the model at once
    assert len(done["first"].done) == 2 and len(done["second"].done) == 1


class UntilKnown(FaultyBackend):
    """Computes once ``producer`` knows every one of ``topics`` (10 s at most): a batch's
    compute is what gives its reply topics' refresh time to land."""

    def __init__(self, inner: EmbeddingBackend, producer: Any, topics: list[str]) -> None:
        super().__init__(inner)
        self.producer, self.topics = producer, topics
        self.known: bool | None = None

    def embed(
        self, items: list[EncodedItem], normalize: list[bool]
    ) -> tuple[list[list[float]], int, int]:
        self.known = knows(self.producer, self.topics)
        return super().embed(items, normalize)


def test_a_batch_learns_its_reply_topics_while_it_computes(
    stack: LocalStack, backend: EmbeddingBackend
) -> None:
    """A batch of five tenants' requests, on a worker whose producer has refreshed its
    metadata since it started (a worker a while up): their reply topics are learnt while the
    model computes, so no reply waits to learn its topic (one by one, each waited for a
    refresh of its own, 100 ms apart)."""
    prefix = f"t-learn-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    topics = Topics(prefix)
    tenants = [f"tenant{i}" for i in range(5)]
    replies_to = [topics.replies(t) for t in tenants]
    sink = runner_sink(settings)
    sink.transport.ensure_topics(replies_to, partitions=1)
    producer = sink.out.producer
    sink.out.send(topics.replies("runner"), b"{}")  # the one topic it tracks
    sink.flush()
    assert refresh(producer, [topics.replies("runner")]), "no refresh: the test shows nothing"
    batch = make_batch(prefix, [f"text {t}" for t in tenants], MODEL)
    items = [
        item.model_copy(
            update={"request": item.request.model_copy(update={"tenant": t, "reply_to": topic})}
        )
        for item, t, topic in zip(batch.items, tenants, replies_to, strict=True)
    ]
    batch = batch.model_copy(update={"items": items})
    model = UntilKnown(backend, producer, replies_to)
    waited = unknown_topic_waits(producer)

    completion = run_batch(batch, BatchContext(backend=model, ledger=MemoryLedger(), sink=sink))

    assert len(completion.done) == 5 and completion.failed == 0
    assert model.known, "the reply topics were not learnt while the batch computed"
    assert waited == []


def test_a_request_asking_for_base64_gets_the_same_vector_as_float32_bytes(
    backend: EmbeddingBackend,
) -> None:
    prefix = "t-b64"
    settings = Settings(topic_prefix=prefix)
    sink, transport = memory_sink(settings)
    ctx = BatchContext(backend=backend, ledger=MemoryLedger(), sink=sink)
    texts = ["a river runs", "to the mill"]
    as_floats = make_batch(prefix, texts, MODEL)
    as_bytes = make_batch(prefix, texts, MODEL, vector_encoding="base64")
    run_batch(as_floats, ctx)
    run_batch(as_bytes, ctx)
    results = {}
    for record in transport.scan(Topics(prefix).replies("runner")):
        reply = Reply.model_validate_json(record.value)
        assert isinstance(reply.result, EmbeddingResult)
        results[reply.request_id] = reply.result
    for plain, packed in zip(as_floats.items, as_bytes.items, strict=True):
        floats = results[plain.request.request_id]
        bytes_ = results[packed.request.request_id]
        assert floats.embedding is not None and bytes_.embedding is None
        assert bytes_.embedding_base64 is not None
        assert bytes_.vector() == pytest.approx(floats.vector(), abs=1e-6)


def test_inputs_given_as_token_ids_are_embedded_as_given_beside_texts(
    backend: EmbeddingBackend,
) -> None:
    """In one batch: a text, its own token ids (the same vector), and ids outside the
    vocabulary (answered invalid_schema alone)."""
    prefix = "t-ids"
    settings = Settings(topic_prefix=prefix)
    sink, transport = memory_sink(settings)
    ctx = BatchContext(backend=backend, ledger=MemoryLedger(), sink=sink)
    own = backend.tokenizer.encode("a river runs", add_special_tokens=False).ids
    batch = make_batch(prefix, ["a river runs"], MODEL)
    given = make_batch(prefix, ["", ""], MODEL)
    for item, ids in zip(given.items, [own, [5, backend.vocab_size]], strict=True):
        item.request = item.request.model_copy(update={"input_ids": ids})
    batch = batch.model_copy(update={"items": batch.items + given.items})
    run_batch(batch, ctx)
    replies = {
        r.request_id: r
        for r in (
            Reply.model_validate_json(record.value)
            for record in transport.scan(Topics(prefix).replies("runner"))
        )
    }
    text, by_ids, outside = (replies[i.request.request_id] for i in batch.items)
    assert isinstance(text.result, EmbeddingResult) and isinstance(by_ids.result, EmbeddingResult)
    assert by_ids.result.vector() == pytest.approx(text.result.vector(), abs=1e-5)
    assert by_ids.result.token_count == len(own) + 2
    assert outside.error is not None and outside.error.code is ErrorCode.invalid_schema
    assert str(backend.vocab_size) in outside.error.message
