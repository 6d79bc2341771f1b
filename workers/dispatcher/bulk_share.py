"""What the lane policy (``lanes``) needs to know of a bucket, from the core's flights and
the live workers: part of the core, no IO. It remembers when each bucket's bulk lane last
moved (the starvation guard)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.flights import Flights
from headrace.workers.dispatcher.lanes import BucketLanes


class BulkShare:
    def __init__(self, config: CoreConfig, flights: Flights, clock: Callable[[], float]) -> None:
        self.config = config
        self.flights = flights
        self.clock = clock
        self._moved: dict[int, float] = {}  # bucket -> since when its bulk waits

    def moved(self, bucket: int) -> None:
        """A bulk batch of ``bucket`` went out."""
        self._moved[bucket] = self.clock()

    def settled(self, bucket: int) -> None:
        """Nothing of ``bucket``'s bulk lane waits: nothing starves."""
        if not self.flights.ready_count(bucket, "bulk"):
            self._moved.pop(bucket, None)

    def lanes_of(self, bucket: int, live: Mapping[int, frozenset[str]]) -> BucketLanes:
        """The bucket's state for the lane policy. A bucket's bulk lane waits from when it
        had a batch ready and none went out, or from its last bulk batch sent."""
        waiting = self.flights.ready_count(bucket, "bulk") > 0
        if waiting:
            self._moved.setdefault(bucket, self.clock())
        return BucketLanes(
            online_ready=bool(self.flights.ready_count(bucket, "online")),
            bulk_ready=waiting,
            in_flight=self.flights.in_flight_count(bucket),
            bulk_on_its_workers=self._sharing(bucket, live),
            max_inflight=self.config.max_inflight_batches_per_bucket,
            live_workers=len(live.get(bucket, ())),
            bulk_waited_s=self.clock() - self._moved[bucket] if waiting else None,
        )

    def _sharing(self, bucket: int, live: Mapping[int, frozenset[str]]) -> int:
        """Bulk batches in flight of the buckets that share a live worker with ``bucket``."""
        mine = live.get(bucket, frozenset())
        return sum(
            self.flights.in_flight_count(other, "bulk")
            for other in self.config.buckets
            if other == bucket or mine & live.get(other, frozenset())
        )
