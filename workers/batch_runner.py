"""Execution of one batch on a worker: claim, admit, compute, reply, mark, notify.

Every request of the batch ends with exactly one of: a reply produced now, already answered
(a redelivery: no second reply), or deferred (another attempt holds its claim).
"""

from __future__ import annotations

import base64
import logging
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch

from headrace.schemas.errors import ErrorCode, ErrorInfo, input_too_long
from headrace.schemas.messages import (
    SCORED,
    Batch,
    BatchInfo,
    BatchItem,
    Completion,
    Cost,
    EmbeddingResult,
    GenerationResult,
    RecordRef,
    Reply,
    Request,
    StreamDelta,
    Timings,
)
from headrace.schemas.params import EmbedParams, priority_rank
from headrace.schemas.results import Result
from headrace.sessions.prompt import render_prompt
from headrace.workers.admission import admission_error
from headrace.workers.backends.base import (
    Backend,
    EncodedItem,
    Generated,
    GenerativeBackend,
    OnFinished,
)
from headrace.workers.batch_context import BatchContext
from headrace.workers.batch_inputs import encode, given_ids_fit
from headrace.workers.generation_results import (
    Pieces,
    generation_result,
    sampling_params,
    token_namer,
)
from headrace.workers.score_rows import score_rows

if TYPE_CHECKING:
    from headrace.workers.backends.scoring import ScoreBackend
from headrace.workers.claims import lost_replies, ref_key, take_from_dead
from headrace.workers.ledger import ClaimState
from headrace.workers.reply_delivery import CANCELLED, Delivery, Early, failure

log = logging.getLogger(__name__)


def run_batch(batch: Batch, ctx: BatchContext) -> Completion:
    ids = [(i.request.tenant, i.request.request_id) for i in batch.items]
    ctx.sink.track(i.request.reply_to for i in batch.items)  # learnt while it computes

    def claim() -> list[ClaimState]:
        return ctx.ledger.claim(
            ids, owner=batch.batch_id, lease_ms=ctx.claim_ms, worker_id=ctx.worker_id
        )

    # An encoder's first attempt computes while its claim is on its way: a redelivery aside,
    # every request of a first attempt is fresh, and what the claim says otherwise is only
    # computed, never sent (a generation's rows go out as they finish: claimed first).
    computed: list[tuple[BatchItem, Reply]] | None = None
    if ctx.claim_beside is not None and batch.attempt == 1 and ctx.backend.task != "generate":
        claiming = ctx.claim_beside.submit(claim)
        computed = answer(batch, batch.items, ctx)
        states = claiming.result()
    else:
        states = claim()
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
            replies.append((item, failure(item, CANCELLED)))
        else:
            fresh.append(item)

    delivery = Delivery(batch, ctx)
    if computed is None:
        replies.extend(answer(batch, fresh, ctx, early=delivery.send))
    else:
        taken = {ref_key(item.ref) for item in fresh}
        replies.extend((item, reply) for item, reply in computed if ref_key(item.ref) in taken)
    return delivery.end(replies, already, deferred)


def _prompt(request: Request, ctx: BatchContext) -> str:
    """The text to encode: the input, after its session's history for a session turn."""
    if request.session_id is None or ctx.sessions is None:
        return request.input
    session = ctx.sessions.get(request.tenant, request.session_id)
    return render_prompt(session.turns, request.input)


def answer(
    batch: Batch, items: list[BatchItem], ctx: BatchContext, early: Early | None = None
) -> list[tuple[BatchItem, Reply]]:
    """Admit, encode and compute ``items``: one reply each (a result or its error), either
    returned or, for rows that finished while others still compute, handed to ``early``."""
    backend = ctx.backend
    now = datetime.fromtimestamp(ctx.clock(), UTC)
    replies: list[tuple[BatchItem, Reply]] = []
    admitted: list[BatchItem] = []
    for item in items:
        problem = admission_error(item.request, now, {backend.name}, backend.max_tokens)
        if problem is None:
            admitted.append(item)
        else:
            replies.append((item, failure(item, problem)))
    if not admitted:
        return replies
    admitted = given_ids_fit(admitted, backend, replies)
    if not admitted:
        return replies
    prompts = [_prompt(i.request, ctx) for i in admitted]
    with ctx.model_turn:
        started = ctx.clock()  # compute time counts tokenisation and the forward pass
        encoded = encode(backend, admitted, prompts)
        runnable: list[tuple[BatchItem, EncodedItem]] = []
        for item, enc in zip(admitted, encoded, strict=True):
            if enc.too_long:
                too_long = input_too_long(enc.token_count, backend.max_tokens)
                replies.append((item, failure(item, too_long)))
            else:
                runnable.append((item, enc))
        replies.extend(_compute(batch, runnable, ctx, started, early))
    return replies


def _compute(
    batch: Batch,
    runnable: list[tuple[BatchItem, EncodedItem]],
    ctx: BatchContext,
    started: float,
    early: Early | None = None,
) -> list[tuple[BatchItem, Reply]]:
    """Run the model on ``runnable``; if it fails, bisect so only the failing items fail.
    Rows a generation backend finishes early go to ``early`` (a failure of that delivery is
    the batch's, not the model's: it is raised once the model returns)."""
    if not runnable:
        return []
    handed: set[int] = set()  # rows of runnable already given to ``early``
    pieces = token_namer(ctx.backend)
    undelivered: list[BaseException] = []
    device_ms: list[float | None] = []  # per row, where the backend measured it (generation)

    def finished(rows: list[tuple[int, Generated]]) -> None:
        if early is None or undelivered:
            return
        now = ctx.clock()
        group = []
        for row, out in rows:
            item, enc = runnable[row]
            tokens = len(enc.ids) + out.completion_tokens
            info = BatchInfo(
                batch_id=batch.batch_id,
                bucket=batch.bucket,
                size=len(runnable),
                real_tokens=tokens,
                padded_tokens=tokens,  # it left the decode loop as it finished
            )
            compute_ms = (now - started) * 1000
            result = generation_result(enc, out, sampling_params(item.request), pieces)
            reply = _reply(
                item,
                result,
                (batch.dispatched_at, started),
                compute_ms,
                info,
                tokens,
                len(runnable),
                out.device_ms,
            )
            group.append((item, reply))
        try:
            early(group)
        except Exception as exc:
            undelivered.append(exc)
            return
        handed.update(row for row, _ in rows)

    try:
        if ctx.backend.task == "generate":
            backend = cast(GenerativeBackend, ctx.backend)
            results, real, padded = _generate(backend, runnable, ctx, finished, device_ms, pieces)
        elif ctx.backend.task in SCORED:
            results, real, padded = score_rows(cast("ScoreBackend", ctx.backend), runnable)
        else:
            results, real, padded = _embed(cast(Backend, ctx.backend), runnable)
    except Exception as exc:
        if undelivered:
            raise undelivered[0] from exc
        if isinstance(exc, torch.OutOfMemoryError) and torch.cuda.is_available():
            torch.cuda.empty_cache()  # then split: each half needs about half the memory
        left = [r for k, r in enumerate(runnable) if k not in handed]
        if not left:
            return []
        if len(left) == 1:
            log.exception("batch %s: item failed", batch.batch_id)
            info = ErrorInfo(code=ErrorCode.model_error, message=f"{type(exc).__name__}: {exc}")
            return [(left[0][0], failure(left[0][0], info))]
        half = len(left) // 2
        return _compute(batch, left[:half], ctx, ctx.clock(), early) + _compute(
            batch, left[half:], ctx, ctx.clock(), early
        )
    if undelivered:
        raise undelivered[0]
    compute_ms = (ctx.clock() - started) * 1000
    batch_info = BatchInfo(
        batch_id=batch.batch_id,
        bucket=batch.bucket,
        size=len(runnable),
        real_tokens=real,
        padded_tokens=padded,
    )
    row_padded = padded // len(runnable)  # every row is padded to the batch's longest
    shares = device_ms or [None] * len(runnable)
    return [
        (
            item,
            _reply(
                item,
                result,
                (batch.dispatched_at, started),
                compute_ms,
                batch_info,
                row_padded,
                len(runnable),
                share,
            ),
        )
        for k, ((item, _), result, share) in enumerate(zip(runnable, results, shares, strict=True))
        if k not in handed
    ]


def _reply(
    item: BatchItem,
    result: Result,
    sent_started: tuple[float, float],
    compute_ms: float,
    batch_info: BatchInfo,
    padded_tokens: int,
    rows: int,
    device_ms: float | None = None,
) -> Reply:
    """A computed row's reply (``sent_started``: when the dispatcher made its batch, when the
    batch started computing, both wall-clock); its device time is what the backend measured
    for it (its share of the forward passes it was in), else an even share of the batch's
    compute (its rows are padded alike)."""
    request = item.request
    sent, started = sent_started
    tokens = (
        result.usage.prompt_tokens + result.usage.completion_tokens
        if isinstance(result, GenerationResult)
        else result.token_count
    )
    return Reply(
        request_id=request.request_id,
        tenant=request.tenant,
        model=request.model,
        result=result,
        timings=Timings(
            queued_ms=max(0.0, (item.arrived_at - request.created_at.timestamp()) * 1000),
            batch_wait_ms=max(0.0, (started - item.arrived_at) * 1000),
            compute_ms=compute_ms,
            to_worker_ms=max(0.0, (started - sent) * 1000),
        ),
        batch=batch_info,
        degraded=item.degraded,
        cost=Cost(
            tokens=tokens,
            padded_tokens=padded_tokens,
            device_ms=compute_ms / rows if device_ms is None else device_ms,
        ),
    )


Computed = tuple[list[Result], int, int]


def _embed(backend: Backend, runnable: list[tuple[BatchItem, EncodedItem]]) -> Computed:
    """The batch's vectors as one float32 array; a row asking for ``base64`` gets its bytes
    (no float objects, no decimal printing), the others JSON numbers."""
    normalize = [cast(EmbedParams, i.request.params).normalize for i, _ in runnable]
    vectors, real, padded = backend.embed([enc for _, enc in runnable], normalize)
    array = np.asarray(vectors, dtype="<f4")
    results: list[Result] = []
    for k, (item, enc) in enumerate(runnable):
        if item.request.vector_encoding == "base64":
            encoded = base64.b64encode(array[k].tobytes()).decode("ascii")
            vector: dict[str, Any] = {"embedding_base64": encoded}
        else:
            vector = {"embedding": array[k].tolist()}
        results.append(
            EmbeddingResult(**vector, token_count=enc.token_count, truncated=enc.truncated)
        )
    return results, real, padded


def _generate(
    backend: GenerativeBackend,
    runnable: list[tuple[BatchItem, EncodedItem]],
    ctx: BatchContext,
    on_finished: OnFinished,
    device_ms: list[float | None],
    pieces: Pieces,
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
    watched = ctx.cancels.watch(keys) if ctx.cancels is not None else None

    def cancelled() -> set[int]:  # cancel stops a running generation early
        if watched is not None:
            return watched.cancelled()
        return {row for row, c in enumerate(ctx.ledger.cancelled(keys)) if c}

    encoded = [replace(enc, rank=priority_rank(i.request.priority)) for i, enc in runnable]
    streaming = on_delta if any(p.stream for p in params) else None  # else no text per token
    try:
        outputs = backend.generate(encoded, params, streaming, cancelled, on_finished)
    finally:
        if watched is not None:
            watched.close()
    results: list[Result] = [
        generation_result(enc, o, p, pieces)
        for enc, o, p in zip(encoded, outputs, params, strict=True)
    ]
    device_ms[:] = [o.device_ms for o in outputs]
    lengths = [len(enc.ids) + o.completion_tokens for enc, o in zip(encoded, outputs, strict=True)]
    return results, sum(lengths), max(lengths) * len(runnable)
