"""Execution of one batch on a worker: claim, admit, compute, reply, mark, notify.

Every request of the batch ends with exactly one of: a reply produced now, already answered
(a redelivery: no second reply), or deferred (another attempt holds its claim).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, cast

import torch

from headrace.health.tracing import Headers, headers_of
from headrace.schemas.errors import ErrorCode, ErrorInfo, input_too_long
from headrace.schemas.messages import (
    Batch,
    BatchInfo,
    BatchItem,
    Completion,
    Cost,
    EmbeddingResult,
    EmbedParams,
    GenerateParams,
    GenerationResult,
    RecordRef,
    Reply,
    Request,
    StreamDelta,
    Timings,
    Usage,
)
from headrace.sessions.prompt import exchange, render_prompt
from headrace.sessions.store import SessionStore
from headrace.transport.base import Delivered
from headrace.workers.admission import admission_error
from headrace.workers.backends.base import Backend, EncodedItem, GenerativeBackend, ModelBackend
from headrace.workers.claims import lost_replies, ref_key, take_from_dead
from headrace.workers.ledger import ClaimState, Ledger, ReplyAt

log = logging.getLogger(__name__)


class ReplySink(Protocol):
    def send(self, topic: str, reply: Reply | StreamDelta, headers: Headers = ()) -> None:
        """``headers``: the request's trace context (``traceparent``)."""
        ...

    def flush(self) -> Sequence[Delivered]:
        """Return once every reply sent is acknowledged by the broker (where each landed);
        raise if one failed."""
        ...

    def missing(self, checks: Sequence[tuple[ReplyAt, str]]) -> list[bool]:
        """For each (where the broker said a reply landed, its request id): is the final
        reply not there (read back)?"""
        ...


@dataclass
class BatchContext:
    backend: ModelBackend
    ledger: Ledger
    sink: ReplySink
    worker_id: str = "worker"
    claim_ms: int = 60_000  # how long a claim outlives a silent owner while computing
    sending_ms: int = 180_000  # ... and while its replies go out (up to the delivery timeout)
    # workers beat this often (None: do not look for dead holders of claims), on these buckets
    heartbeat_s: float | None = None
    buckets: list[int] = field(default_factory=list)
    clock: Callable[[], float] = time.time
    stats: dict[str, float] = field(default_factory=lambda: {"batches": 0, "replies": 0})
    # called with the replies about to be sent (the cache's write-through)
    before_delivery: Callable[[list[tuple[BatchItem, Reply]]], None] | None = None
    sessions: SessionStore | None = None  # conversation histories of generate requests
    # called with the batch's bucket and its replies once they are acknowledged (metrics)
    after_delivery: Callable[[int, list[tuple[BatchItem, Reply]]], None] | None = None
    model_version: str | None = None  # the version this worker serves (stamped on replies)
    # called with the replies of requests a shadow version computes too (after delivery)
    shadowed: Callable[[list[tuple[BatchItem, Reply]]], None] | None = None


def run_batch(batch: Batch, ctx: BatchContext) -> Completion:
    ids = [(i.request.tenant, i.request.request_id) for i in batch.items]
    states = ctx.ledger.claim(
        ids, owner=batch.batch_id, lease_ms=ctx.claim_ms, worker_id=ctx.worker_id
    )
    already: list[RecordRef] = []
    deferred: list[RecordRef] = []
    fresh: list[BatchItem] = []
    replies: list[tuple[BatchItem, Reply]] = []
    states = take_from_dead(batch, states, ctx)
    found_lost = lost_replies(
        [i for i, st in zip(batch.items, states, strict=True) if st is ClaimState.answered],
        batch.batch_id,
        ctx,
    )
    for item, state in zip(batch.items, states, strict=True):
        if state is ClaimState.answered and ref_key(item.ref) not in found_lost:
            already.append(item.ref)
        elif state is ClaimState.busy:
            deferred.append(item.ref)
        elif state is ClaimState.cancelled:
            replies.append((item, _failure(item, CANCELLED)))
        else:
            fresh.append(item)

    started = ctx.clock()
    replies.extend(answer(batch, fresh, ctx))
    compute_ms = (ctx.clock() - started) * 1000
    answering = [(i.request.tenant, i.request.request_id) for i, _ in replies]
    cancelled = ctx.ledger.begin_send(answering, owner=batch.batch_id, ttl_ms=ctx.sending_ms)
    # a request cancelled while it was computed finishes, but its requester sees cancelled
    replies = [
        (item, _failure(item, CANCELLED) if late else reply)
        for (item, reply), late in zip(replies, cancelled, strict=True)
    ]
    replies = stamped(replies, ctx.model_version)
    _record_sessions(replies, ctx)
    if ctx.before_delivery is not None:
        try:
            ctx.before_delivery(replies)
        except Exception:  # the cache never fails a batch
            log.exception("batch %s: before-delivery hook failed", batch.batch_id)
    for item, reply in replies:
        ctx.sink.send(item.request.reply_to, reply, headers_of(item.traceparent))
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
            log.warning("batch %s: shadow comparison not recorded", batch.batch_id, exc_info=True)
    ctx.stats["batches"] += 1
    ctx.stats["replies"] += len(replies)
    failed = sum(
        1 for _, r in replies if r.error is not None and r.error.code is ErrorCode.model_error
    )
    completion = Completion(
        batch_id=batch.batch_id,
        done=already + [i.ref for i, _ in replies],
        deferred=deferred,
        failed=failed,
        computed=sum(1 for _, r in replies if r.cost is not None),
        padded_tokens=sum(r.cost.padded_tokens for _, r in replies if r.cost is not None),
        compute_ms=compute_ms,
    )
    ctx.ledger.finish_batch(answering, batch.dispatcher_id, completion, where)
    return completion


CANCELLED = ErrorInfo(code=ErrorCode.cancelled, message="cancelled")


def stamped(
    replies: list[tuple[BatchItem, Reply]], version: str | None
) -> list[tuple[BatchItem, Reply]]:
    """The replies saying which model version made them (unchanged when none is known)."""
    if version is None:
        return replies
    return [(i, r.model_copy(update={"model_version": version})) for i, r in replies]


def _prompt(request: Request, ctx: BatchContext) -> str:
    """The text to encode: the input, after its session's history for a session turn."""
    if request.session_id is None or ctx.sessions is None:
        return request.input
    session = ctx.sessions.get(request.tenant, request.session_id)
    return render_prompt(session.turns, request.input)


def _record_sessions(replies: list[tuple[BatchItem, Reply]], ctx: BatchContext) -> None:
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


def answer(
    batch: Batch, items: list[BatchItem], ctx: BatchContext
) -> list[tuple[BatchItem, Reply]]:
    """Admit, encode and compute ``items``: one reply each (a result or its error)."""
    backend = ctx.backend
    now = datetime.fromtimestamp(ctx.clock(), UTC)
    replies: list[tuple[BatchItem, Reply]] = []
    admitted: list[BatchItem] = []
    for item in items:
        problem = admission_error(item.request, now, {backend.name}, backend.max_tokens)
        if problem is None:
            admitted.append(item)
        else:
            replies.append((item, _failure(item, problem)))
    if not admitted:
        return replies
    started = ctx.clock()  # compute time counts tokenisation and the forward pass
    encoded = backend.encode(
        [_prompt(i.request, ctx) for i in admitted], [i.request.params.truncate for i in admitted]
    )
    runnable: list[tuple[BatchItem, EncodedItem]] = []
    for item, enc in zip(admitted, encoded, strict=True):
        if enc.too_long:
            too_long = input_too_long(enc.token_count, backend.max_tokens)
            replies.append((item, _failure(item, too_long)))
        else:
            runnable.append((item, enc))
    replies.extend(_compute(batch, runnable, ctx, started))
    return replies


def _compute(
    batch: Batch,
    runnable: list[tuple[BatchItem, EncodedItem]],
    ctx: BatchContext,
    started: float,
) -> list[tuple[BatchItem, Reply]]:
    """Run the model on ``runnable``; if it fails, bisect so only the failing items fail."""
    if not runnable:
        return []
    try:
        if ctx.backend.task == "generate":
            results, real, padded = _generate(cast(GenerativeBackend, ctx.backend), runnable, ctx)
        else:
            results, real, padded = _embed(cast(Backend, ctx.backend), runnable)
    except Exception as exc:
        if isinstance(exc, torch.OutOfMemoryError) and torch.cuda.is_available():
            torch.cuda.empty_cache()  # then split: each half needs about half the memory
        if len(runnable) == 1:
            log.exception("batch %s: item failed", batch.batch_id)
            info = ErrorInfo(code=ErrorCode.model_error, message=f"{type(exc).__name__}: {exc}")
            return [(runnable[0][0], _failure(runnable[0][0], info))]
        half = len(runnable) // 2
        return _compute(batch, runnable[:half], ctx, ctx.clock()) + _compute(
            batch, runnable[half:], ctx, ctx.clock()
        )
    compute_ms = (ctx.clock() - started) * 1000
    batch_info = BatchInfo(
        batch_id=batch.batch_id,
        bucket=batch.bucket,
        size=len(runnable),
        real_tokens=real,
        padded_tokens=padded,
    )
    out = []
    row_padded = padded // len(runnable)  # every row is padded to the batch's longest
    for (item, _), result in zip(runnable, results, strict=True):
        request = item.request
        tokens = (
            result.token_count
            if isinstance(result, EmbeddingResult)
            else result.usage.prompt_tokens + result.usage.completion_tokens
        )
        reply = Reply(
            request_id=request.request_id,
            tenant=request.tenant,
            model=request.model,
            result=result,
            timings=Timings(
                queued_ms=max(0.0, (item.arrived_at - request.created_at.timestamp()) * 1000),
                batch_wait_ms=max(0.0, (started - item.arrived_at) * 1000),
                compute_ms=compute_ms,
            ),
            batch=batch_info,
            degraded=item.degraded,
            cost=Cost(
                tokens=tokens,
                padded_tokens=row_padded,
                device_ms=compute_ms * row_padded / padded if padded else 0.0,
            ),
        )
        out.append((item, reply))
    return out


Computed = tuple[list[EmbeddingResult | GenerationResult], int, int]


def _embed(backend: Backend, runnable: list[tuple[BatchItem, EncodedItem]]) -> Computed:
    normalize = [cast(EmbedParams, i.request.params).normalize for i, _ in runnable]
    vectors, real, padded = backend.embed([enc for _, enc in runnable], normalize)
    results: list[EmbeddingResult | GenerationResult] = [
        EmbeddingResult(embedding=v, token_count=enc.token_count, truncated=enc.truncated)
        for (_, enc), v in zip(runnable, vectors, strict=True)
    ]
    return results, real, padded


def _generate(
    backend: GenerativeBackend, runnable: list[tuple[BatchItem, EncodedItem]], ctx: BatchContext
) -> Computed:
    """Rows that asked to stream get their text as StreamDelta records as it is decoded
    (numbered from 0; a rerun of the batch sends the same ones again). Sampling without a
    seed is seeded from the request id, so a rerun samples the same tokens."""
    params = [sampling_params(i.request) for i, _ in runnable]
    seq = [0] * len(runnable)

    def on_delta(row: int, text: str) -> None:
        request = runnable[row][0].request
        if not params[row].stream:
            return
        delta = StreamDelta(
            request_id=request.request_id,
            tenant=request.tenant,
            model=request.model,
            seq=seq[row],
            text=text,
        )
        seq[row] += 1
        ctx.sink.send(request.reply_to, delta)

    keys = [(i.request.tenant, i.request.request_id) for i, _ in runnable]

    def cancelled() -> set[int]:  # cancel stops a running generation early
        return {row for row, c in enumerate(ctx.ledger.cancelled(keys)) if c}

    outputs = backend.generate([enc for _, enc in runnable], params, on_delta, cancelled)
    results: list[EmbeddingResult | GenerationResult] = [
        GenerationResult(
            text=o.text,
            finish_reason=o.finish_reason,
            usage=Usage(prompt_tokens=o.prompt_tokens, completion_tokens=o.completion_tokens),
            truncated=enc.truncated,
        )
        for (_, enc), o in zip(runnable, outputs, strict=True)
    ]
    lengths = [
        len(enc.ids) + o.completion_tokens for (_, enc), o in zip(runnable, outputs, strict=True)
    ]
    return results, sum(lengths), max(lengths) * len(runnable)


def sampling_params(request: Request) -> GenerateParams:
    params = cast(GenerateParams, request.params)
    if params.seed is not None:
        return params
    digest = hashlib.sha256(f"{request.tenant}/{request.request_id}".encode()).digest()
    return params.model_copy(update={"seed": int.from_bytes(digest[:8], "big") >> 1})


def _failure(item: BatchItem, error: ErrorInfo) -> Reply:
    request = item.request
    return Reply(
        request_id=request.request_id, tenant=request.tenant, model=request.model, error=error
    )
