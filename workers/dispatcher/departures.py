"""Batches out of the dispatcher's core (no IO): formed from the lanes' fair queues as late
as they can be, each bucket's next batch taken from the lane its policy chooses, sent by
``Outgoing``, and a lane's topic paused while its queue holds its read-ahead."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from cachetools import FIFOCache

from headrace.schemas.params import priority_rank
from headrace.schemas.topics import LANES, Lane
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.bulk_share import BulkShare
from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.fair import FairBatcher
from headrace.workers.dispatcher.flights import DispatcherStats, Flights, Pending
from headrace.workers.dispatcher.lanes import next_lane
from headrace.workers.dispatcher.outgoing import Outgoing
from headrace.workers.dispatcher.refusals import Refusals

QUANTA_PER_BATCH = 16  # a tenant's turn, by default: this share of a batch's budget
UNSEEN_CAP = 8  # batches a bucket may have out before any of its workers is seen


def fair_batcher(
    config: CoreConfig, lane: Lane, clock: Callable[[], float], weight: Callable[[str], float]
) -> FairBatcher[Pending]:
    """A lane's queue: requests wait per tenant (``weight(tenant)``: its share) and per
    priority class, then are cut into batches by the lane's batcher (with ``fair_share``
    off, one tenant and one class: arrival order)."""
    budget = config.batch_tokens(lane)
    fair = config.fair_share
    return FairBatcher(
        config.batcher(lane, clock),
        tenant_of=lambda p: p.item.request.tenant if fair else "",
        band_of_item=lambda p: priority_rank(p.item.request.priority) if fair else 0,
        weight=weight,
        batch_tokens=budget,
        max_wait_ms=config.max_wait_ms,
        read_ahead_tokens=config.fair_read_ahead_tokens,
        quantum=config.fair_quantum_tokens or max(1, budget // QUANTA_PER_BATCH),
        clock=clock,
    )


class Departures:
    def __init__(
        self,
        config: CoreConfig,
        flights: Flights,
        batchers: Mapping[tuple[int, Lane], FairBatcher[Pending]],
        bulk_share: BulkShare,
        outgoing: Outgoing,
        refusals: Refusals,
        cancelled: FIFOCache[ev.RequestKey, None],
        stats: DispatcherStats,
        *,
        live: Callable[[], Mapping[int, frozenset[str]]],
        capacity: Callable[[int], int],
    ) -> None:
        """``live()``: each bucket's live workers; ``capacity(bucket)``: the batches they
        take at once."""
        self.config = config
        self.flights = flights
        self.batchers = batchers
        self.bulk_share = bulk_share
        self.outgoing = outgoing
        self.refusals = refusals
        self.cancelled = cancelled
        self.stats = stats
        self.live = live
        self.capacity = capacity
        self.paused: set[tuple[int, Lane]] = set()  # (bucket, lane) whose topic is paused
        self._turn = 0

    def flush_due(self, out: list[ev.Action]) -> None:
        """Every batch that may leave now, to ``out``; topics paused or resumed."""
        # a rotating start: buckets whose bulk shares workers take the bulk slot in turn
        buckets = self.config.buckets
        self._turn = (self._turn + 1) % len(buckets)
        self.bulk_share.observe_online()
        for bucket in buckets[self._turn :] + buckets[: self._turn]:
            if self._holds(bucket):  # else nothing to form or send (most buckets, most passes)
                self._depart(bucket, out)
            self.bulk_share.settled(bucket)
            for lane in LANES:
                self.set_paused(bucket, lane, self.batchers[bucket, lane].full(), out)

    def _holds(self, bucket: int) -> bool:
        """Whether ``bucket`` has requests waiting in a lane's queue or batches ready."""
        return bool(
            self.flights.ready_count(bucket)
            or len(self.batchers[bucket, "online"])
            or len(self.batchers[bucket, "bulk"])
        )

    def _depart(self, bucket: int, out: list[ev.Action]) -> None:
        """The bucket's batches formed, and those that may leave sent."""
        for lane in LANES:
            self._form(bucket, lane)
        while (chosen := self._next_lane(bucket)) is not None:
            pendings = self.flights.next_ready(bucket, chosen)
            assert pendings is not None
            if chosen == "bulk":
                self.bulk_share.moved(bucket)
            if self.cancelled:  # cancelled while it waited: answered, not sent
                keep = [p for p in pendings if p.key not in self.cancelled]
                for p in pendings:
                    if p.key in self.cancelled:
                        self.stats.cancelled += 1
                        out.append(self.refusals.cancelled(p, bucket))
                pendings = keep
            if pendings:
                out += self.outgoing.dispatch(bucket, pendings, handoff=self._free(bucket))

    def _free(self, bucket: int) -> bool:
        """A batch sent now goes into a free place (it may be handed straight to an idle
        worker; else it queues behind what Celery holds). Before the bucket's workers are
        seen (the live set is read once a second: a pipeline just started), a place is free
        while every batch of this dispatcher's in flight there has a worker (handed over, or
        seen started), so none waits in Celery's queue to be passed: an offer finds an idle
        worker's token or none, so nothing is handed to a worker that is not idle. A
        worker's places are shared by its buckets (``_limits``)."""
        if self.capacity(bucket):
            return self.flights.in_flight_count(bucket) < self._limits(bucket)[0]
        return self.flights.unstarted(bucket) == 0

    def seconds_until_due(self) -> float | None:
        """Until the next batch is due to be formed (None: nothing waits for a time)."""
        waits = [
            w
            for (bucket, lane), b in self.batchers.items()
            if (w := b.seconds_until_due(room=self.openings(bucket, lane)[1])) is not None
        ]
        return min(waits) if waits else None

    def _limits(self, bucket: int) -> tuple[int, int, int]:
        """For ``bucket``: (places, ahead, cap). ``places``: the batches its live workers can
        run for it now, their places less those the other buckets they serve hold (a
        worker's places are shared by its buckets: a continuous-batching worker serving
        every bucket has 64, not 64 each). ``ahead``: batches formed, out or ready, to keep
        them busy, the places and one waiting for each worker (none seen yet, starting or
        Redis away: ``max_inflight_batches_per_bucket``, or ``UNSEEN_CAP``). ``cap``: the
        batches it may have out, ``ahead`` but at most ``max_inflight_batches_per_bucket``
        where it is set. (A fixed 8 by default held a bucket of ten workers to eight
        batches, and a continuous-batching worker's 64 places to eight batches a bucket.)"""
        most = self.config.max_inflight_batches_per_bucket
        live = self.live()
        workers = len(live.get(bucket, ()))
        if workers:
            sharers = self.bulk_share.sharers(bucket, live)
            beside = self.flights.in_flight_beside(bucket, sharers) if len(sharers) > 1 else 0
            places = self.capacity(bucket) - beside
            ahead = places + workers
        else:
            places, ahead = 0, most or UNSEEN_CAP
        return places, ahead, ahead if most is None else min(most, ahead)

    def cap(self, bucket: int) -> int:
        """The batches ``bucket`` may have out (``_limits``)."""
        return self._limits(bucket)[2]

    def openings(self, bucket: int, lane: Lane) -> tuple[bool, bool]:
        """(the bucket has a free slot, the lane has room for one more batch ahead). A slot
        is free only under the bucket's ``cap`` too: a batch formed at once past it could
        not leave, and what waits is better batched with what comes."""
        places, ahead, cap = self._limits(bucket)
        busy = self.flights.in_flight_count(bucket) + self.flights.ready_count(bucket)
        lane_out = self.flights.ready_count(bucket, lane) + self.flights.in_flight_count(
            bucket, lane
        )
        return busy < min(places, cap), busy < ahead or not lane_out

    def set_paused(self, bucket: int, lane: Lane, pause: bool, out: list[ev.Action]) -> None:
        if pause == ((bucket, lane) in self.paused):
            return
        if pause:
            self.paused.add((bucket, lane))
        else:
            self.paused.discard((bucket, lane))
        out.append(ev.SetPaused(self.config.topics.requests(bucket, lane), pause))

    def _next_lane(self, bucket: int) -> Lane | None:
        """The lane of the bucket's next batch out. Nothing ready: none, without the lane
        policy's state (a scan of the buckets that share workers, every bucket twice a
        pass: two thirds of the core's time for a lone request)."""
        if not self.flights.ready_count(bucket):
            return None
        return next_lane(
            self.bulk_share.lanes_of(bucket, self.live(), self.cap(bucket)), self.config.lanes
        )

    def _form(self, bucket: int, lane: Lane) -> None:
        """Batches of what waits in the lane's fair queues, formed as late as they can be:
        at once while the bucket has a free slot (``idle``); a full or overdue one while
        each live worker has at most one batch waiting for it, or the lane has none ready
        or out (``room``: so a lane the other keeps busy still has one batch for its
        starvation guard). So the round over the tenants is made when a worker can take
        its outcome, not when the records were read, and no more than a batch per worker
        waits in the queue ahead of a newcomer."""
        batcher = self.batchers[bucket, lane]
        while len(batcher):
            idle, room = self.openings(bucket, lane)
            batches = batcher.take(idle=idle, room=room)
            for batch in batches:
                self.flights.queue(bucket, batch)
            if not batches:
                return
