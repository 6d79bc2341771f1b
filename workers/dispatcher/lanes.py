"""Which lane a bucket's next batch comes from: online first, bulk with what is left, and
bulk always moves. Pure.

A bucket may have ``max_inflight`` batches out. Online batches go first whenever one is
ready. A bulk batch goes out only while bulk holds fewer than ``bulk_cap`` batches on the
bucket's workers: their number less ``reserved_workers`` (at least one), so that a worker is
free for the next online batch instead of busy with bulk work that cannot be interrupted.
Workers serve several buckets, so what counts is the bulk batches in flight of every bucket
that shares a live worker with this one (``bulk_on_its_workers``). The guard: a bucket whose
bulk lane has had a batch ready and sent none for ``starvation_s`` sends one even while
online batches are ready, if no bulk batch is in flight on its workers: a saturated online
lane slows bulk down but never stops it. (Buckets sharing workers take the bulk share in
turn: the core starts each pass at another bucket.)

Harvest: once no online work has waited or run on the bucket's workers for
``harvest_after_s``, bulk may hold every one of them (idle capacity is not left idle); the
moment online work comes back the cap drops again, so online waits for at most one bulk
batch (bulk batches are the smaller ones) before a worker is its.
"""

from __future__ import annotations

from dataclasses import dataclass

from headrace.config.settings import default
from headrace.schemas.topics import Lane


@dataclass(frozen=True)
class LanePolicy:
    reserved_workers: int = default("bulk_reserved_workers")
    starvation_s: float = default("bulk_starvation_s")
    harvest_after_s: float | None = default(
        "bulk_harvest_after_s"
    )  # None: bulk never takes the reserved workers

    def bulk_cap(self, live_workers: int, online_quiet_s: float | None = 0.0) -> int:
        """``online_quiet_s``: since online work last waited or ran on these workers (None:
        not since the dispatcher started)."""
        quiet = online_quiet_s is None or (
            self.harvest_after_s is not None and online_quiet_s >= self.harvest_after_s
        )
        if quiet and self.harvest_after_s is not None:
            return max(1, live_workers)
        return max(1, live_workers - self.reserved_workers)


@dataclass(frozen=True)
class BucketLanes:
    """What the choice needs to know of one bucket."""

    online_ready: bool
    bulk_ready: bool
    in_flight: int  # both lanes
    bulk_on_its_workers: int  # of every bucket sharing a live worker with this one
    max_inflight: int
    live_workers: int
    bulk_waited_s: float | None  # since the bucket's bulk lane last moved (None: none ready)
    # since online work last waited or ran on the bucket's workers (None: never seen)
    online_quiet_s: float | None = 0.0


def next_lane(state: BucketLanes, policy: LanePolicy) -> Lane | None:
    """The lane to send the bucket's next batch from, or None (nothing goes out now)."""
    if state.in_flight >= state.max_inflight:
        return None
    starving = (
        state.bulk_ready
        and state.bulk_on_its_workers == 0
        and state.bulk_waited_s is not None
        and state.bulk_waited_s >= policy.starvation_s
    )
    if starving:
        return "bulk"
    if state.online_ready:
        return "online"
    cap = policy.bulk_cap(state.live_workers, state.online_quiet_s)
    if state.bulk_ready and state.bulk_on_its_workers < cap:
        return "bulk"
    return None
