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
"""

from __future__ import annotations

from dataclasses import dataclass

from headrace.schemas.topics import Lane


@dataclass(frozen=True)
class LanePolicy:
    reserved_workers: int = 1
    starvation_s: float = 5.0

    def bulk_cap(self, live_workers: int) -> int:
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
    if state.bulk_ready and state.bulk_on_its_workers < policy.bulk_cap(state.live_workers):
        return "bulk"
    return None
