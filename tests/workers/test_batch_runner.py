"""One batch on a worker, with the real model, Redis and broker: out-of-memory splits the
batch, a poison item fails alone, cancelled and answered requests are handled by their claim
state, and the completion says what happened."""

from __future__ import annotations

import uuid

import pytest
import torch

from headrace import connections
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Reply
from headrace.transport import open_transport
from headrace.workers.backends import EmbeddingBackend
from headrace.workers.backends.base import EncodedItem
from headrace.workers.batch_runner import BatchContext, run_batch
from headrace.workers.faults import FaultyBackend
from headrace.workers.ledger import ClaimState, Ledger
from headrace.workers.worker import TopicReplySink
from tests.integration.topics import read_topic
from tests.models.loaded import loaded_minilm
from tests.workers.batches import make_batch

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


@pytest.fixture(scope="module")
def backend() -> EmbeddingBackend:
    return loaded_minilm()


def test_oom_splits_poison_fails_alone_cancelled_and_answered_are_respected(
    stack: LocalStack, backend: EmbeddingBackend
) -> None:
    prefix = f"t-runner-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    ledger = Ledger(connections.redis_client(settings), prefix, 60)
    model = SmallMemory(backend, rows=2)
    ctx = BatchContext(
        backend=model,
        ledger=ledger,
        sink=TopicReplySink(open_transport(settings), settings),
        worker_id="w",
    )
    texts = [f"sentence number {i}" for i in range(8)]
    texts[5] = "this one is <<poison>>"
    batch = make_batch(prefix, texts, MODEL)
    keys = [(i.request.tenant, i.request.request_id) for i in batch.items]
    ledger.cancel(*keys[1])
    ledger.mark_answered([keys[2]])

    completion = run_batch(batch, ctx)

    replies = {
        r.request_id: r
        for r in (
            Reply.model_validate_json(x.value)
            for x in read_topic(settings, batch.items[0].request.reply_to)
        )
    }
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


def test_each_reply_carries_its_share_of_the_batch_device_time(
    stack: LocalStack, backend: EmbeddingBackend
) -> None:
    prefix = f"t-cost-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix)
    ctx = BatchContext(
        backend=backend,
        ledger=Ledger(connections.redis_client(settings), prefix, 60),
        sink=TopicReplySink(open_transport(settings), settings),
        worker_id="w",
    )
    texts = ["short", "a somewhat longer sentence than the first", "mid length one"]
    batch = make_batch(prefix, texts, MODEL)

    completion = run_batch(batch, ctx)

    replies = [
        Reply.model_validate_json(x.value)
        for x in read_topic(settings, batch.items[0].request.reply_to)
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
