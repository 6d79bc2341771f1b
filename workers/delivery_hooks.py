"""What a worker does around a batch's delivery besides replying: metrics, spans, each
tenant's usage and each version's outcomes once replies are acknowledged (``after_delivery``),
and handing shadowed requests' results to the comparison (``comparing``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from headrace import connections
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import BatchItem, Reply
from headrace.usage.meter import Totals, UsageMeter
from headrace.workers import metrics
from headrace.workers.comparisons import Comparisons, Side
from headrace.workers.spans import record_spans
from headrace.workers.version_stats import VersionStats

log = logging.getLogger(__name__)


def after_delivery(
    usage: UsageMeter, stats: VersionStats, version: str
) -> Callable[[int, list[tuple[BatchItem, Reply]]], None]:
    """Once a batch's replies are acknowledged: its metrics, its requests' spans, each
    tenant's usage, and what the version did (the canary judge reads it)."""

    def after(bucket: int, replies: list[tuple[BatchItem, Reply]]) -> None:
        now = time.time()
        metrics.observe(bucket, replies, now)
        record_spans(bucket, replies, now)
        try:
            usage.add(usage_of(replies))
            stats.add(version, now, outcomes_of(replies, now))
        except connections.REDIS_ERRORS:  # accounting never fails a batch already answered
            log.warning("usage of a batch not counted: Redis unreachable", exc_info=True)

    return after


def outcomes_of(replies: list[tuple[BatchItem, Reply]], now: float) -> list[tuple[bool, float]]:
    """(no model error, ms since the dispatcher read it) for each reply the model made or
    failed: what a version is judged by (refusals, cancels and deadlines say nothing)."""
    out = []
    for item, reply in replies:
        failed = reply.error is not None and reply.error.code is ErrorCode.model_error
        if reply.cost is not None or failed:
            out.append((not failed, max(0.0, (now - item.arrived_at) * 1000)))
    return out


def comparing(
    comparisons: Comparisons, role: str, version: str
) -> Callable[[list[tuple[BatchItem, Reply]]], None]:
    """Hands each shadowed request's result to the comparison, as ``role`` (served or
    shadow) of ``version``."""

    def compare(pairs: list[tuple[BatchItem, Reply]]) -> None:
        for item, reply in pairs:
            if item.compare_with is not None:
                request = item.request
                side = Side.of(version, reply)
                comparisons.record(
                    request.tenant, request.request_id, role, side, item.compare_with
                )

    return compare


def usage_of(replies: list[tuple[BatchItem, Reply]]) -> dict[str, Totals]:
    """Per tenant: requests computed, their tokens and device time."""
    out: dict[str, Totals] = {}
    for _, reply in replies:
        if reply.cost is not None:
            totals = out.setdefault(reply.tenant, Totals())
            totals += Totals(requests=1, tokens=reply.cost.tokens, device_ms=reply.cost.device_ms)
    return out
