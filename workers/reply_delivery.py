"""A batch's replies going out: each part cancelled-checked, stamped, recorded in its session,
cached, sent, acknowledged, marked answered and reported to the dispatcher."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from headrace.health.tracing import headers_of
from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import (
    Batch,
    BatchItem,
    Completion,
    GenerationResult,
    RecordRef,
    Reply,
)
from headrace.sessions.prompt import exchange
from headrace.workers.ledger import ReplyAt

if TYPE_CHECKING:
    from headrace.workers.batch_context import BatchContext

log = logging.getLogger(__name__)

Early = Callable[[list[tuple[BatchItem, Reply]]], None]  # replies ready before the batch ends


@dataclass
class Delivery:
    """A batch's replies going out: in parts while other rows still compute (a generation
    backend that batches continuously hands rows over as they finish), the rest at the end.
    Each part is sent, marked answered where it landed, and reported to the dispatcher (a
    ``Completion`` of its own) before the batch goes on: a later attempt of the batch finds
    those requests answered, and the dispatcher can move their offsets on."""

    batch: Batch
    ctx: BatchContext
    parts: list[Completion] = field(default_factory=list)

    def send(self, replies: list[tuple[BatchItem, Reply]]) -> None:
        if replies:
            self._part(replies, [], [], last=False)

    def end(
        self,
        replies: list[tuple[BatchItem, Reply]],
        already: list[RecordRef],
        deferred: list[RecordRef],
    ) -> Completion:
        """The last part (what is left, possibly nothing); returns the whole batch's
        completion."""
        self._part(replies, already, deferred, last=True)
        self.ctx.stats["batches"] += 1
        parts = self.parts
        return Completion(
            batch_id=self.batch.batch_id,
            done=[ref for part in parts for ref in part.done],
            deferred=deferred,
            failed=sum(part.failed for part in parts),
            computed=sum(part.computed for part in parts),
            padded_tokens=sum(part.padded_tokens for part in parts),
            compute_ms=sum(part.compute_ms for part in parts),
        )

    def _part(
        self,
        replies: list[tuple[BatchItem, Reply]],
        already: list[RecordRef],
        deferred: list[RecordRef],
        *,
        last: bool,
    ) -> None:
        batch, ctx = self.batch, self.ctx
        answering = [(i.request.tenant, i.request.request_id) for i, _ in replies]
        cancelled = ctx.ledger.begin_send(answering, owner=batch.batch_id, ttl_ms=ctx.sending_ms)
        # a request cancelled while it was computed finishes, but its requester sees cancelled
        replies = [
            (item, failure(item, CANCELLED) if late else reply)
            for (item, reply), late in zip(replies, cancelled, strict=True)
        ]
        replies = stamped(replies, ctx.model_version)
        record_sessions(replies, ctx)
        if ctx.before_delivery is not None:
            try:
                ctx.before_delivery(replies)
            except Exception:  # the cache never fails a batch
                log.exception("batch %s: before-delivery hook failed", batch.batch_id)
        for item, reply in replies:
            ctx.sink.send(item.request.reply_to, reply, headers_of(item.traceparent))
        if last and ctx.replies_sent is not None:
            # the worker is idle once its last replies are on their way: said while the
            # broker acknowledges them, so a requester answered by them finds it idle (said
            # after the acknowledgement, a requester's next request could come first)
            ctx.sink.push()
            ctx.replies_sent()
        landed = {d.key: d for d in ctx.sink.flush() if d.key is not None}  # the last per key
        where = {
            (item.request.tenant, item.request.request_id): ReplyAt(d.topic, d.partition, d.offset)
            for item, _ in replies
            if (d := landed.get(item.request.request_id.encode())) is not None
        }
        if ctx.after_delivery is not None:
            ctx.after_delivery(batch.bucket, replies)
        compared = [(i, r) for i, r in replies if i.compare_with is not None]
        if compared and ctx.shadowed is not None:
            try:
                ctx.shadowed(compared)
            except Exception:  # a comparison is a sample: never a reason to fail a batch
                log.warning(
                    "batch %s: shadow comparison not recorded", batch.batch_id, exc_info=True
                )
        ctx.stats["replies"] += len(replies)
        completion = Completion(
            batch_id=batch.batch_id,
            done=already + [i.ref for i, _ in replies],
            deferred=deferred,
            failed=sum(
                1
                for _, r in replies
                if r.error is not None and r.error.code is ErrorCode.model_error
            ),
            computed=sum(1 for _, r in replies if r.cost is not None),
            padded_tokens=sum(r.cost.padded_tokens for _, r in replies if r.cost is not None),
            # device time: what the rows were charged (continuous batches share one loop,
            # so the wall time since the last part would count it once per batch)
            compute_ms=sum(r.cost.device_ms for _, r in replies if r.cost is not None),
        )
        notify = ctx.ledger.finish_batch if last else ctx.ledger.finish_rows
        notify(answering, batch.dispatcher_id, completion, where)
        self.parts.append(completion)


CANCELLED = ErrorInfo(code=ErrorCode.cancelled, message="cancelled")


def stamped(
    replies: list[tuple[BatchItem, Reply]], version: str | None
) -> list[tuple[BatchItem, Reply]]:
    """The replies saying which model version made them (unchanged when none is known)."""
    if version is None:
        return replies
    return [(i, r.model_copy(update={"model_version": version})) for i, r in replies]


def record_sessions(replies: list[tuple[BatchItem, Reply]], ctx: BatchContext) -> None:
    """Append each answered session turn and its answer to the session (merging with any
    concurrent write; idempotent by request id)."""
    if ctx.sessions is None:
        return
    for item, reply in replies:
        request = item.request
        if request.session_id is None or not isinstance(reply.result, GenerationResult):
            continue
        session = ctx.sessions.get(request.tenant, request.session_id)
        turns = exchange(request.request_id, request.input, reply.result.text)
        ctx.sessions.append(session, turns)


def failure(item: BatchItem, error: ErrorInfo) -> Reply:
    request = item.request
    return Reply(
        request_id=request.request_id, tenant=request.tenant, model=request.model, error=error
    )
