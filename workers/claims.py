"""Claims another attempt holds when a batch starts, settled before computing (part of
``run_batch``):

- ``busy``, held by an attempt whose worker stopped beating mid-batch: taken now (one
  still *sending* keeps its claim: its replies may be out);
- ``answered``, but the reply is not where the broker acknowledged it (tansu has lost
  acknowledged writes): claimed again and answered now. Read back only for requests already
  answered (a client's resend, a redelivery), so the normal path pays nothing.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from headrace.schemas.messages import Batch, BatchItem, RecordRef
from headrace.workers import metrics
from headrace.workers.ledger import ClaimState

if TYPE_CHECKING:
    from headrace.workers.batch_context import BatchContext

log = logging.getLogger(__name__)


def ref_key(ref: RecordRef) -> tuple[str, int, int]:
    return (ref.topic, ref.partition, ref.offset)


def take_from_dead(batch: Batch, states: list[ClaimState], ctx: BatchContext) -> list[ClaimState]:
    """Requests another attempt holds (``busy``): those held by an attempt whose worker is
    dead (it stopped beating mid-batch) are taken now and computed here."""
    busy = [i for i, st in enumerate(states) if st is ClaimState.busy]
    if not busy or ctx.heartbeat_s is None:
        return states
    ids = [(batch.items[i].request.tenant, batch.items[i].request.request_id) for i in busy]
    holders = ctx.ledger.holders(ids)
    known = [(i, key, h) for i, key, h in zip(busy, ids, holders, strict=True) if h is not None]
    taken = ctx.ledger.take_from_dead(
        [key for _, key, _ in known],
        [h for _, _, h in known],
        owner=batch.batch_id,
        lease_ms=ctx.claim_ms,
        beat_within_s=3 * ctx.heartbeat_s,
        buckets=ctx.buckets,
    )
    out = list(states)
    for (i, key, holder), ok in zip(known, taken, strict=True):
        if ok:
            log.warning("took %s/%s from dead attempt %s", *key, holder)
            out[i] = ClaimState.fresh
    return out


def lost_replies(
    items: list[BatchItem], owner: str, ctx: BatchContext
) -> set[tuple[str, int, int]]:
    """Of requests the ledger has as answered (a resend came), those whose reply is not
    where the broker acknowledged it (a broker that lost an acknowledged write: seen with
    tansu), claimed again for ``owner`` to be answered now. Read back only for resends, so
    it costs nothing on the normal path."""
    if not items:
        return set()
    ids = [(i.request.tenant, i.request.request_id) for i in items]
    known = [
        (item, key, at)
        for item, key, at in zip(items, ids, ctx.ledger.replies_at(ids), strict=True)
        if at is not None
    ]
    checks = [(at, item.request.request_id) for item, _, at in known]
    gone = [
        (item, key)
        for (item, key, _), missing in zip(known, ctx.sink.missing(checks), strict=True)
        if missing
    ]
    if not gone:
        return set()
    claimed = ctx.ledger.reclaim([key for _, key in gone], owner, ctx.claim_ms)
    lost = {ref_key(item.ref) for (item, _), ok in zip(gone, claimed, strict=True) if ok}
    for item, _ in gone:
        log.warning(
            "the reply to %s/%s is not on %s where the broker acknowledged it: answered again",
            item.request.tenant,
            item.request.request_id,
            item.request.reply_to,
        )
    metrics.replies_recovered(len(lost))
    return lost
