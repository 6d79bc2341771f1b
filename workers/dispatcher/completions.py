"""Completion notices into the dispatcher core's state (no IO): each answered record is
finished, its bucket's health and workload hear how the batch went, the requests a worker
found held by another attempt wait to be batched again, the online backlog is counted
down, and a batch with nothing left unanswered leaves the flights."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from headrace.schemas.messages import Completion
from headrace.workers.dispatcher.deferrals import Deferrals
from headrace.workers.dispatcher.flights import Flights, ref_key
from headrace.workers.dispatcher.health import BucketHealth
from headrace.workers.dispatcher.quotas import Quotas
from headrace.workers.dispatcher.workload import Workload


def take_completions(
    completions: Sequence[Completion],
    flights: Flights,
    health: Mapping[int, BucketHealth],
    workload: Workload,
    deferrals: Deferrals,
    quotas: Quotas,
) -> None:
    """A completion may be a part of its batch (rows answered while others compute) or a
    late one from an attempt already sent again (its records are finished all the same)."""
    for completion in completions:
        for ref in completion.done:
            flights.finish(ref)
        flight = flights.get(completion.batch_id)
        if flight is None:
            continue  # a late answer from an attempt already sent again
        health[flight.bucket].record(
            ok=len(completion.done) - completion.failed, failed=completion.failed
        )
        workload.observe(
            flight.bucket,
            completion.compute_ms / 1000,
            completion.computed,
            completion.padded_tokens,
        )
        for ref in completion.done:
            flight.pending.pop(ref_key(ref), None)
        for ref in completion.deferred:
            deferrals.hold(flight.bucket, flight.pending.pop(ref_key(ref), None))
        if flight.lane == "online":
            quotas.answered(flight.bucket, len(completion.done))
        flights.uncount(flight)
        if not flight.pending:
            flights.take(completion.batch_id)
