"""A shadow batch on the shadow version's worker: computed like any batch, but nothing is
claimed, answered, streamed, cached or counted as done. Each result is handed to the
comparison (``comparisons``) against what the served version answered."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from headrace.health.tracing import Headers
from headrace.schemas.messages import Batch, BatchItem, Reply, StreamDelta
from headrace.transport.base import Delivered
from headrace.workers.batch_context import BatchContext
from headrace.workers.batch_runner import answer
from headrace.workers.ledger import ReplyAt
from headrace.workers.reply_delivery import stamped

log = logging.getLogger(__name__)


class _Discard:
    """A reply sink that sends nothing: a shadow's stream deltas go nowhere."""

    def track(self, topics: Iterable[str]) -> None:
        pass

    def send(self, topic: str, reply: Reply | StreamDelta, headers: Headers = ()) -> None:
        pass

    def push(self) -> None:
        pass

    def flush(self) -> Sequence[Delivered]:
        return []

    def missing(self, checks: Sequence[tuple[ReplyAt, str]]) -> list[bool]:
        return [False] * len(checks)


def run_shadow(
    batch: Batch,
    ctx: BatchContext,
    compare: Callable[[list[tuple[BatchItem, Reply]]], None],
) -> int:
    """Compute the shadow batch and hand its replies to ``compare``; the rows computed."""
    quiet = replace(ctx, sink=_Discard(), before_delivery=None, after_delivery=None)
    replies = stamped(answer(batch, list(batch.items), quiet), ctx.model_version)
    try:
        compare(replies)
    except Exception:
        log.warning("shadow batch %s: comparison not recorded", batch.batch_id, exc_info=True)
    return len(replies)
