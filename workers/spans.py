"""A batch's requests as spans of their own traces, recorded once their replies are
acknowledged, from the times the replies carry: ``headrace.queued`` (created -> read by the
dispatcher), ``headrace.batch_wait`` (read -> its batch started), ``headrace.compute`` (the
batch's model time, linked to the batch) and ``headrace.reply`` (computed -> acknowledged by
the broker). One ``headrace.batch`` span per batch (or per half of a split batch) links to
every request it computed. Requests that came with no trace context record nothing; with no
OpenTelemetry SDK configured every span is a no-op."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.trace import Link, Status, StatusCode

from headrace.health.tracing import context_of, link_to, tracer
from headrace.schemas.messages import BatchItem, Reply


def _ns(unix_s: float) -> int:
    return int(unix_s * 1e9)


def record_spans(bucket: int, replies: Sequence[tuple[BatchItem, Reply]], done_at: float) -> None:
    traced = [(i, r) for i, r in replies if i.traceparent is not None]
    if not traced:
        return
    computed: dict[str, list[tuple[BatchItem, Reply]]] = {}
    for item, reply in traced:
        if reply.batch is not None and reply.timings is not None:
            computed.setdefault(reply.batch.batch_id, []).append((item, reply))
        else:
            _refused(item, reply, done_at)
    for batch_id, rows in computed.items():
        _batch(batch_id, bucket, rows, done_at)


def _batch(batch_id: str, bucket: int, rows: list[tuple[BatchItem, Reply]], done_at: float) -> None:
    first = rows[0][1]
    assert first.timings is not None and first.batch is not None
    started = rows[0][0].arrived_at + first.timings.batch_wait_ms / 1000
    ended = started + first.timings.compute_ms / 1000
    links = [link for item, _ in rows if (link := link_to(item.traceparent or "")) is not None]
    batch_span = tracer().start_span(
        "headrace.batch",
        links=links,
        start_time=_ns(started),
        attributes={
            "headrace.batch_id": batch_id,
            "headrace.bucket": bucket,
            "headrace.rows": len(rows),
            "headrace.real_tokens": first.batch.real_tokens,
            "headrace.padded_tokens": first.batch.padded_tokens,
        },
    )
    batch_span.end(end_time=_ns(ended))
    to_batch = [Link(batch_span.get_span_context())]
    for item, reply in rows:
        assert reply.timings is not None
        request = item.request
        parent = context_of(item.traceparent)
        arrived = item.arrived_at
        begun = arrived + reply.timings.batch_wait_ms / 1000
        finished = begun + reply.timings.compute_ms / 1000
        attributes = {
            "headrace.request_id": request.request_id,
            "headrace.tenant": request.tenant,
            "headrace.batch_id": batch_id,
        }
        legs: list[tuple[str, float, float, list[Link]]] = [
            ("headrace.queued", request.created_at.timestamp(), arrived, []),
            ("headrace.batch_wait", arrived, begun, []),
            ("headrace.compute", begun, finished, to_batch),
            ("headrace.reply", finished, done_at, []),
        ]
        for name, start, end, links_ in legs:
            span = tracer().start_span(
                name,
                context=parent,
                links=links_,
                start_time=_ns(start),
                attributes=attributes,
            )
            span.end(end_time=_ns(max(start, end)))


def _refused(item: BatchItem, reply: Reply, done_at: float) -> None:
    """An error reply the worker sent without computing (cancelled, expired, too long)."""
    span = tracer().start_span(
        "headrace.reply",
        context=context_of(item.traceparent),
        start_time=_ns(item.arrived_at),
        attributes={
            "headrace.request_id": item.request.request_id,
            "headrace.tenant": item.request.tenant,
        },
    )
    if reply.error is not None:
        span.set_status(Status(StatusCode.ERROR, reply.error.code.value))
    span.end(end_time=_ns(max(item.arrived_at, done_at)))
