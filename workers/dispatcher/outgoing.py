"""Batches out of the dispatcher's core (pure): a ready batch becomes one Celery task per
model version serving its requests (``versions``), each tracked in flight with its lease, and
an untracked copy of the requests a shadow version also computes."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from headrace.schemas.messages import Batch, BatchItem, Degraded
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.flights import DispatcherStats, Flights, InFlight, Pending, ref_key
from headrace.workers.dispatcher.observer import Observer
from headrace.workers.dispatcher.versions import Versions


class Outgoing:
    def __init__(
        self,
        config: CoreConfig,
        flights: Flights,
        versions: Versions,
        stats: DispatcherStats,
        observer: Observer,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.topics = config.topics
        self.flights = flights
        self.versions = versions
        self.stats = stats
        self.observer = observer
        self.clock = clock
        self.wall_clock = wall_clock

    def dispatch(
        self, bucket: int, pendings: list[Pending], handoff: bool = False
    ) -> list[ev.SendBatch]:
        """One batch per model version serving these requests, and shadow copies.
        ``handoff``: the bucket has a free place (its batches may go to an idle worker)."""
        out = []
        for version, part in self.versions.split(bucket, pendings):
            # the shadow that also computes each request (asked once per request)
            shadows = [
                self.versions.shadow_of(bucket, version, p) if version else None for p in part
            ]
            out.append(self._send(bucket, part, version, shadows, handoff))
            if version is not None:
                out += self._shadow(bucket, version, part, shadows)
        return out

    def _send(
        self,
        bucket: int,
        pendings: list[Pending],
        version: str | None,
        shadows: list[str | None],
        handoff: bool,
    ) -> ev.SendBatch:
        attempt = 1 + max(p.failures for p in pendings)
        lane = pendings[0].lane
        fallback = version is not None and version == self.versions.fallback_for(bucket)
        batch = Batch(
            batch_id=uuid.uuid4().hex,
            bucket=bucket,
            dispatcher_id=self.config.dispatcher_id,
            attempt=attempt,
            dispatched_at=self.wall_clock(),
            items=[_marked(p, s, fallback) for p, s in zip(pendings, shadows, strict=True)],
            lane=lane,
            model_version=version,
        ).keep_records_read(
            {ref_key(p.item.ref): p.record for p in pendings if p.record is not None}
        )
        real = sum(p.tokens for p in pendings)
        padded = len(pendings) * max(p.tokens for p in pendings)
        lease_s = self.config.lease_base_s + padded / 1000 * self.config.lease_s_per_1k_tokens
        flight = InFlight(
            bucket=bucket,
            attempt=attempt,
            lease_deadline=self.clock() + lease_s,
            lease_s=lease_s,
            pending={ref_key(p.item.ref): p for p in pendings},
            lane=lane,
        )
        self.flights.send_out(batch.batch_id, flight)
        self.stats.batches += 1
        self.stats.per_bucket[bucket] += 1
        self.stats.real_tokens += real
        self.stats.padded_tokens += padded
        self.observer.batch(bucket, len(pendings), real, padded)
        return ev.SendBatch(
            batch=batch,
            queue=self.topics.queue(bucket, lane, version),
            real_tokens=real,
            padded_tokens=padded,
            lengths=tuple(p.tokens for p in pendings),
            handoff=handoff and lane == "online",
        )

    def _shadow(
        self, bucket: int, version: str, pendings: list[Pending], shadows: list[str | None]
    ) -> list[ev.SendBatch]:
        """A copy of the shadowed requests for the shadow version: not tracked (nothing
        waits for it, a lost one is a lost sample) and never sent again."""
        copied = [p for p, s in zip(pendings, shadows, strict=True) if s is not None]
        shadow = next((s for s in shadows if s is not None), None)
        if shadow is None:
            return []
        batch = Batch(
            batch_id=f"shadow-{uuid.uuid4().hex}",
            bucket=bucket,
            dispatcher_id=self.config.dispatcher_id,
            dispatched_at=self.wall_clock(),
            items=[p.item.model_copy(update={"compare_with": version}) for p in copied],
            lane=copied[0].lane,
            model_version=shadow,
            shadow=True,
        )
        self.stats.shadowed += len(copied)
        return [
            ev.SendBatch(
                batch=batch,
                queue=self.topics.queue(bucket, batch.lane, shadow),
                real_tokens=sum(p.tokens for p in copied),
                padded_tokens=len(copied) * max(p.tokens for p in copied),
                shadow=True,
            )
        ]


def _marked(pending: Pending, shadow: str | None, fallback: bool = False) -> BatchItem:
    """The request as its batch carries it: marked when a shadow computes it too, or when
    the model's fallback version computes it (its stable version has no live worker)."""
    update: dict[str, object] = {}
    if shadow is not None:
        update["compare_with"] = shadow
    if fallback:
        update["degraded"] = Degraded(rung="fallback_version", reason="no_workers")
    return pending.item.model_copy(update=update) if update else pending.item
