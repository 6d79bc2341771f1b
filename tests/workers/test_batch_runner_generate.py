"""Generation batches on a worker with the TEST MODEL (headrace-test-lm), the real ledger
(Redis) and broker: cancel stops a running generation early, and a batch redelivered after
a crash before its final reply streams the same pieces again, so the reassembled stream is
complete and in order, each piece once."""

from __future__ import annotations

import time
import uuid

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.consumers.streams import DeltaAssembler
from headrace.models import tiny_lm
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import (
    Batch,
    GenerateParams,
    GenerationResult,
    Reply,
    StreamDelta,
    parse_reply_record,
)
from headrace.transport import open_transport
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.batch_runner import BatchContext, run_batch
from headrace.workers.ledger import Ledger
from headrace.workers.worker import TopicReplySink
from tests.integration.topics import read_topic
from tests.tiny_model import load_test_lm
from tests.workers.batches import make_batch

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


def test_cancel_stops_a_running_generation(stack: LocalStack, backend: GenerationBackend) -> None:
    prefix = f"t-gen-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    ledger = Ledger(connections.redis_client(settings), prefix, 60)
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
    run_batch(batch, BatchContext(backend=backend, ledger=ledger, sink=sink, worker_id="w"))

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
    ledger = Ledger(connections.redis_client(settings), prefix, 60)
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
    healthy = BatchContext(
        backend=backend, ledger=ledger, sink=TopicReplySink(open_transport(settings), settings)
    )
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
