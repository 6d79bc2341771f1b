"""Generation batches on a worker with the TEST MODEL (headrace-test-lm), the real ledger
(Redis) and broker: cancel stops a running generation early, and a batch redelivered after
a crash before its final reply streams the same pieces again, so the reassembled stream is
complete and in order, each piece once; with continuous batching a row is answered as it
finishes, while its batch-mates still decode."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.consumers.streams import DeltaAssembler
from headrace.models import tiny_lm
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import (
    Batch,
    GenerationResult,
    Reply,
    StreamDelta,
    parse_reply_record,
)
from headrace.schemas.params import GenerateParams
from headrace.transport import open_transport
from headrace.workers.backends.base import EncodedItem, Generated, OnFinished, Sampling
from headrace.workers.backends.continuous import ContinuousDecoder
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.batch_context import BatchContext
from headrace.workers.batch_runner import run_batch
from headrace.workers.cancel_watch import CancelWatch
from headrace.workers.faults import FaultyBackend
from headrace.workers.ledger import Ledger, RedisLedger
from headrace.workers.reply_sink import TopicReplySink
from tests.integration.topics import read_topic
from tests.tiny_model import load_test_lm
from tests.workers.batches import make_batch, runner_sink

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def backend() -> GenerationBackend:
    b = load_test_lm()
    b.cancel_check_s = 0.0  # ask the ledger every step
    return b


class CancelOnFirstDelta(TopicReplySink):
    """Cancels one request (as the dispatcher does for a control record) once it streamed."""

    def __init__(self, settings: Settings, ledger: Ledger, key: tuple[str, str]) -> None:
        super().__init__(open_transport(settings), settings)
        self.ledger, self.key = ledger, key

    def send(self, topic: str, reply: Reply | StreamDelta, headers: object = ()) -> None:
        super().send(topic, reply)
        if isinstance(reply, StreamDelta) and (reply.tenant, reply.request_id) == self.key:
            self.ledger.cancel(*self.key)


def records(settings: Settings, batch: Batch) -> list[Reply | StreamDelta]:
    topic = batch.items[0].request.reply_to
    return [parse_reply_record(r.value) for r in read_topic(settings, topic)]


@pytest.mark.parametrize("watched", [False, True], ids=["batch-asks", "cancel-watch"])
def test_cancel_stops_a_running_generation(
    stack: LocalStack, backend: GenerationBackend, watched: bool
) -> None:
    prefix = f"t-gen-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    ledger = RedisLedger(connections.redis_client(settings), prefix, 60)
    params = GenerateParams(max_tokens=300, stream=True)
    batch = make_batch(
        prefix,
        ["The headrace", "A sluice at the head"],
        tiny_lm.NAME,
        task="generate",
        params=params,
    )
    first = (batch.items[0].request.tenant, batch.items[0].request.request_id)
    sink = CancelOnFirstDelta(settings, ledger, first)
    # a continuous worker's batches ask through one watch for all of them
    cancels = CancelWatch(ledger.cancelled, backend.cancel_check_s) if watched else None
    ctx = BatchContext(backend=backend, ledger=ledger, sink=sink, worker_id="w", cancels=cancels)
    try:
        run_batch(batch, ctx)
    finally:
        if cancels is not None:
            cancels.close()
    assert cancels is None or cancels.looks > 0

    out = records(settings, batch)
    finals = {r.request_id: r for r in out if isinstance(r, Reply)}
    cancelled = finals[first[1]]
    assert cancelled.error is not None and cancelled.error.code is ErrorCode.cancelled
    streamed = [d for d in out if isinstance(d, StreamDelta) and d.request_id == first[1]]
    assert 0 < len(streamed) < 50  # stopped within a step or two, not after 300 tokens
    other = finals[batch.items[1].request.request_id].result
    assert isinstance(other, GenerationResult) and other.usage.completion_tokens > 50


class CrashBeforeFinal(TopicReplySink):
    """Streams, then fails on the final reply: a worker dying mid-delivery."""

    def send(self, topic: str, reply: Reply | StreamDelta, headers: object = ()) -> None:
        if isinstance(reply, Reply):
            raise ConnectionError("worker died before its final reply")
        super().send(topic, reply)


def test_a_redelivered_batch_streams_the_same_pieces(
    stack: LocalStack, backend: GenerationBackend
) -> None:
    prefix = f"t-gen-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    ledger = RedisLedger(connections.redis_client(settings), prefix, 60)
    hot = GenerateParams(max_tokens=20, temperature=1.0, stream=True)  # no seed given
    batch = make_batch(
        prefix, ["Water leaves the river"], tiny_lm.NAME, task="generate", params=hot
    )
    rid = batch.items[0].request.request_id
    crashing = BatchContext(
        backend=backend,
        ledger=ledger,
        sink=CrashBeforeFinal(open_transport(settings), settings),
        worker_id="w1",
        claim_ms=200,
        sending_ms=200,
    )
    with pytest.raises(ConnectionError):
        run_batch(batch, crashing)
    time.sleep(0.5)  # its claim expires, as a dead worker's does
    again = batch.model_copy(update={"batch_id": uuid.uuid4().hex, "attempt": 2})
    healthy = BatchContext(backend=backend, ledger=ledger, sink=runner_sink(settings))
    run_batch(again, healthy)

    out = [r for r in records(settings, batch) if r.request_id == rid]
    deltas = [r for r in out if isinstance(r, StreamDelta)]
    [final] = [r for r in out if isinstance(r, Reply)]
    assert isinstance(final.result, GenerationResult)
    seqs = [d.seq for d in deltas]
    half = len(seqs) // 2
    assert seqs[:half] == seqs[half:] == list(range(half))  # each attempt: 0..n, the same
    assembler = DeltaAssembler()
    text = "".join(piece for d in deltas for piece in assembler.add(d))
    assert assembler.duplicates == half
    assert text == final.result.text and assembler.finish(final) == ""


class Watching(TopicReplySink):
    """Notes how many decode steps had run when each final reply was sent."""

    def __init__(self, settings: Settings, decoder: ContinuousDecoder) -> None:
        super().__init__(open_transport(settings), settings)
        self.decoder = decoder
        self.steps_at: dict[str, int] = {}

    def send(self, topic: str, reply: Reply | StreamDelta, headers: object = ()) -> None:
        super().send(topic, reply)
        if isinstance(reply, Reply):
            self.steps_at[reply.request_id] = self.decoder.steps


def test_a_row_that_finishes_first_is_answered_while_its_batch_mate_decodes(
    stack: LocalStack,
) -> None:
    continuous = load_test_lm(continuous_rows=16)
    prefix = f"t-gen-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    ledger = RedisLedger(connections.redis_client(settings), prefix, 60)
    batch = make_batch(
        prefix,
        ["The headrace", "A sluice at the head"],
        tiny_lm.NAME,
        task="generate",
        params=GenerateParams(max_tokens=2),
    )
    short, long = batch.items
    streamed = GenerateParams(max_tokens=300, stream=True)
    long = long.model_copy(update={"request": long.request.model_copy(update={"params": streamed})})
    batch = batch.model_copy(update={"items": [short, long]})
    assert continuous.decoder is not None
    sink = Watching(settings, continuous.decoder)
    try:
        done = run_batch(batch, BatchContext(backend=continuous, ledger=ledger, sink=sink))
    finally:
        continuous.close()

    # the short row's reply went out while its batch-mate still decoded
    steps_at = sink.steps_at
    assert steps_at[short.request.request_id] < steps_at[long.request.request_id]
    # the dispatcher heard of it in a notice of its own, before the batch ended
    first, *rest = ledger.take_completions("d")
    assert first.done == [short.ref]
    assert [ref for c in rest for ref in c.done] == [long.ref]
    assert done.done == [short.ref, long.ref] and done.computed == 2
    finals = {r.request_id: r for r in records(settings, batch) if isinstance(r, Reply)}
    assert finals.keys() == {short.request.request_id, long.request.request_id}
    short_reply, long_reply = finals[short.request.request_id], finals[long.request.request_id]
    assert isinstance(short_reply.result, GenerationResult)
    assert short_reply.result.usage.completion_tokens <= 2
    assert isinstance(long_reply.result, GenerationResult)
    assert long_reply.result.usage.completion_tokens > 100
    assert short_reply.timings is not None and long_reply.timings is not None
    assert short_reply.timings.compute_ms < long_reply.timings.compute_ms

    # a second attempt of the batch (a redelivery) finds both answered: no reply twice
    again = batch.model_copy(update={"batch_id": uuid.uuid4().hex, "attempt": 2})
    redone = run_batch(again, BatchContext(backend=load_test_lm(), ledger=ledger, sink=sink))
    assert redone.computed == 0 and len(redone.done) == 2
    assert len([r for r in records(settings, batch) if isinstance(r, Reply)]) == 2


class FailsAfterFirstRow(FaultyBackend):
    """Its first call hands row 0 over as finished, then fails for the rest, as a decode
    step that fails for every row still running does; later calls succeed."""

    def __init__(self, inner: GenerationBackend) -> None:
        super().__init__(inner)
        self.sizes: list[int] = []

    def generate(
        self,
        items: list[EncodedItem],
        params: Sequence[Sampling],
        on_delta: Callable[[int, str], None] | None = None,
        cancelled: Callable[[], set[int]] | None = None,
        on_finished: OnFinished | None = None,
    ) -> list[Generated]:
        self.sizes.append(len(items))
        first = len(self.sizes) == 1

        def only_row_0(rows: list[tuple[int, Generated]]) -> None:
            if on_finished is not None and (mine := [(i, g) for i, g in rows if i == 0]):
                on_finished(mine)

        out = super().generate(
            items, params, on_delta, cancelled, only_row_0 if first else on_finished
        )
        if first:
            raise RuntimeError("the decode step failed")
        return out


def test_rows_answered_early_are_not_computed_again_when_the_rest_fail(
    stack: LocalStack,
) -> None:
    inner = load_test_lm(continuous_rows=8)
    prefix = f"t-gen-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    ledger = RedisLedger(connections.redis_client(settings), prefix, 60)
    batch = make_batch(
        prefix,
        ["The headrace", "A sluice", "Water leaves the river"],
        tiny_lm.NAME,
        task="generate",
        params=GenerateParams(max_tokens=4),
    )
    model = FailsAfterFirstRow(inner)
    sink = runner_sink(settings)
    try:
        done = run_batch(batch, BatchContext(backend=model, ledger=ledger, sink=sink))
    finally:
        inner.close()

    # row 0 went out early; the other two were bisected and computed alone
    assert model.sizes == [3, 1, 1]
    finals = [r for r in records(settings, batch) if isinstance(r, Reply)]
    assert sorted(r.request_id for r in finals) == sorted(i.request.request_id for i in batch.items)
    assert all(isinstance(r.result, GenerationResult) for r in finals)
    assert done.computed == 3 and done.failed == 0
