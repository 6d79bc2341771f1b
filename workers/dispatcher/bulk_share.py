"""What the lane policy (``lanes``) needs to know of a bucket, from the core's flights and
the live workers: part of the core, no IO. It remembers when each bucket's bulk lane last
moved (the starvation guard)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.flights import Flights
from headrace.workers.dispatcher.lanes import BucketLanes


class BulkShare:
    def __init__(
        self,
        config: CoreConfig,
        flights: Flights,
        clock: Callable[[], float],
        online_waiting: Callable[[int], bool] = lambda _: False,
    ) -> None:
        """``online_waiting(bucket)``: online requests of the bucket wait to be batched."""
        self.config = config
        self.flights = flights
        self.clock = clock
        self.online_waiting = online_waiting
        self._moved: dict[int, float] = {}  # bucket -> since when its bulk waits
        self._online_busy: dict[int, float] = {}  # bucket -> when online work last waited or ran
        self._sharers_of: dict[int, list[int]] = {}  # for the live set last seen
        self._live_seen: Mapping[int, frozenset[str]] | None = None

    def observe_online(self) -> None:
        """Note the buckets where online work waits or runs now (once a pass, before any
        ``lanes_of``)."""
        now = self.clock()
        for bucket in self.config.buckets:
            if (
                self.online_waiting(bucket)
                or self.flights.ready_count(bucket, "online")
                or self.flights.in_flight_count(bucket, "online")
            ):
                self._online_busy[bucket] = now

    def moved(self, bucket: int) -> None:
        """A bulk batch of ``bucket`` went out."""
        self._moved[bucket] = self.clock()

    def settled(self, bucket: int) -> None:
        """Nothing of ``bucket``'s bulk lane waits: nothing starves."""
        if not self.flights.ready_count(bucket, "bulk"):
            self._moved.pop(bucket, None)

    def lanes_of(
        self, bucket: int, live: Mapping[int, frozenset[str]], max_inflight: int
    ) -> BucketLanes:
        """The bucket's state for the lane policy (``max_inflight``: the batches it may have
        out). A bucket's bulk lane waits from when it had a batch ready and none went out,
        or from its last bulk batch sent."""
        waiting = self.flights.ready_count(bucket, "bulk") > 0
        if waiting:
            self._moved.setdefault(bucket, self.clock())
        return BucketLanes(
            online_ready=bool(self.flights.ready_count(bucket, "online")),
            bulk_ready=waiting,
            in_flight=self.flights.in_flight_count(bucket),
            bulk_on_its_workers=self._sharing(bucket, live),
            max_inflight=max_inflight,
            live_workers=len(live.get(bucket, ())),
            bulk_waited_s=self.clock() - self._moved[bucket] if waiting else None,
            online_quiet_s=self._online_quiet(bucket, live),
        )

    def sharers(self, bucket: int, live: Mapping[int, frozenset[str]]) -> list[int]:
        """``bucket`` and the buckets that share a live worker with it (kept until the core
        sees another live set)."""
        if live is not self._live_seen:
            self._live_seen, self._sharers_of = live, {}
        found = self._sharers_of.get(bucket)
        if found is None:
            mine = live.get(bucket, frozenset())
            found = self._sharers_of[bucket] = [
                other
                for other in self.config.buckets
                if other == bucket or mine & live.get(other, frozenset())
            ]
        return found

    def _sharing(self, bucket: int, live: Mapping[int, frozenset[str]]) -> int:
        """Bulk batches in flight of the buckets that share a live worker with ``bucket``."""
        return sum(self.flights.in_flight_count(b, "bulk") for b in self.sharers(bucket, live))

    def _online_quiet(self, bucket: int, live: Mapping[int, frozenset[str]]) -> float | None:
        """Seconds since online work last waited or ran on ``bucket``'s workers (None: not
        since this dispatcher started)."""
        now = self.clock()
        seen = [self._online_busy[b] for b in self.sharers(bucket, live) if b in self._online_busy]
        return now - max(seen) if seen else None
