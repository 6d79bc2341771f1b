"""Batches that went wrong after the core sent them, and Redis going away: part of the core,
no IO.

- a worker that stops beating while it computes a batch: the batch is settled (a scan of the
  reply topics finds what it answered before it died), then sent again split in halves;
- a batch past its lease (``redelivery.lease_verdict``): sent again as it was, or split;
- Redis unreachable: no bucket counts as without workers meanwhile (unknown is not dead);
- Redis back empty: every batch in flight is settled, then what is unanswered is sent again.

Requests given up on (``redelivery_exhausted``) go back to the core to be answered.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from headrace.workers.dispatcher.config import CoreConfig
from headrace.workers.dispatcher.events import Action, RequestKey, Settle, Settled
from headrace.workers.dispatcher.flights import DispatcherStats, Flights, InFlight, Pending
from headrace.workers.dispatcher.health import BucketHealth
from headrace.workers.dispatcher.observer import Observer
from headrace.workers.dispatcher.redelivery import Lease, after_failure, lease_verdict

log = logging.getLogger(__name__)

Exhausted = list[tuple[Pending, int]]  # (request given up on, its bucket)
WAITING_SAID_EVERY_S = 60.0


@dataclass
class _Settling:
    flights: list[InFlight]
    redeliver: bool  # a dead attempt (split and count it), or Redis lost (send again as is)


class Recovery:
    def __init__(
        self,
        config: CoreConfig,
        flights: Flights,
        health: Mapping[int, BucketHealth],
        stats: DispatcherStats,
        observer: Observer,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.flights = flights
        self.health = health
        self.stats = stats
        self.observer = observer
        self.clock = clock
        self._settling: dict[str, _Settling] = {}
        self._jobs = itertools.count(1)
        self._state_down_since: float | None = None

    @property
    def settling(self) -> int:
        return len(self._settling)

    # --- workers and leases ------------------------------------------------------------------
    def runners_seen(
        self,
        live: Mapping[int, frozenset[str]],
        runners: Mapping[str, str | None],
        out: list[Action],
    ) -> None:
        """Learn which worker runs each batch; settle the batches of workers now dead."""
        everyone = frozenset().union(*live.values())
        for batch_id, flight in self.flights.in_flight().items():
            flight.runner = runners.get(batch_id) or flight.runner
            if flight.runner is None or flight.runner in everyone:
                continue
            log.warning("worker %s died computing batch %s", flight.runner, batch_id)
            self.flights.take(batch_id)
            self._settle([flight], redeliver=True, dead_batch=batch_id, out=out)

    def check_leases(self, live: Mapping[int, frozenset[str]]) -> Exhausted:
        now = self.clock()
        everyone = frozenset().union(*live.values()) if live else frozenset()
        exhausted: Exhausted = []
        for batch_id, flight in self.flights.in_flight().items():
            verdict = lease_verdict(flight, now, everyone, bool(live.get(flight.bucket)))
            if verdict is Lease.running:
                continue
            if verdict is Lease.extend:
                flight.lease_deadline = now + flight.lease_s
                self._say_waiting(batch_id, flight, now, live)
                continue
            self.flights.take(batch_id)
            log.warning("batch %s ran past its lease (runner %s)", batch_id, flight.runner)
            exhausted += self.redeliver(flight, counted=verdict is Lease.failed)
        return exhausted

    @staticmethod
    def _say_waiting(
        batch_id: str, flight: InFlight, now: float, live: Mapping[int, frozenset[str]]
    ) -> None:
        """A batch nobody took and no live worker can take: logged at its first extension,
        then once a minute, with the buckets that do have live workers."""
        if flight.waiting_since is None:
            flight.waiting_since = now
        elif now - flight.waiting_said < WAITING_SAID_EVERY_S:
            return
        flight.waiting_said = now
        log.warning(
            "batch %s (bucket %d, %d requests) waits %.0fs for a worker: none live for its "
            "bucket (live workers per bucket: %s)",
            batch_id,
            flight.bucket,
            len(flight.pending),
            now - flight.waiting_since,
            {b: len(w) for b, w in sorted(live.items())},
        )

    def redeliver(self, flight: InFlight, counted: bool) -> Exhausted:
        """Send the unanswered requests of ``flight`` again: as they were (``counted``
        False: no worker had started it), or split after a failed attempt."""
        alive = self.flights.alive(list(flight.pending.values()))
        if not alive:
            return []
        self.stats.redispatched += 1
        self.observer.redispatched()
        if not counted:
            self.flights.queue(flight.bucket, alive, front=True)
            return []
        plan = after_failure(alive, self.config.max_attempts)
        for part in reversed(plan.batches):
            self.flights.queue(flight.bucket, part, front=True)
        return [] if plan.exhausted is None else [(plan.exhausted, flight.bucket)]

    # --- Redis: away, back, lost ---------------------------------------------------------------
    def state_failed(self, reason: str) -> None:
        for health in self.health.values():
            health.observe_workers(1)  # unknown is not dead: do not turn requests away for it
        if self._state_down_since is None:
            self._state_down_since = self.clock()
            log.warning("Redis unreachable (%s); batches wait until it is back", reason)

    def state_ok(self) -> None:
        if self._state_down_since is not None:
            log.info("Redis reachable again after %.1fs", self.clock() - self._state_down_since)
            self._state_down_since = None

    def state_lost(self, out: list[Action]) -> None:
        """Redis came back empty: every batch in flight may be gone with its queue. Those of
        its requests with a reply on their topic are done; the rest are sent again."""
        self.stats.redis_recoveries += 1
        flights = self.flights.take_all()
        if flights:
            self._settle(flights, redeliver=False, dead_batch=None, out=out)

    # --- settling ------------------------------------------------------------------------------
    def _settle(
        self, flights: list[InFlight], redeliver: bool, dead_batch: str | None, out: list[Action]
    ) -> None:
        wanted: dict[str, set[RequestKey]] = {}
        for flight in flights:
            for p in self.flights.alive(list(flight.pending.values())):
                wanted.setdefault(p.item.request.reply_to, set()).add(p.key)
        job_id = f"settle-{next(self._jobs)}"
        self._settling[job_id] = _Settling(flights, redeliver)
        keys = {topic: frozenset(k) for topic, k in wanted.items()}
        out.append(Settle(job_id, keys, dead_batch=dead_batch))

    def settled(self, event: Settled) -> Exhausted:
        """What a scan found is done; the rest is sent again."""
        settling = self._settling.pop(event.job_id, None)
        if settling is None:
            return []
        exhausted: Exhausted = []
        again = 0
        for flight in settling.flights:
            for p in list(flight.pending.values()):
                if p.key in event.answered:
                    self.flights.finish(p.item.ref)
            if settling.redeliver:
                exhausted += self.redeliver(flight, counted=True)
                continue
            alive = self.flights.alive(list(flight.pending.values()))
            if alive:
                again += len(alive)
                self.flights.queue(flight.bucket, alive, front=True)
        if not settling.redeliver:
            log.warning(
                "Redis lost its data: %d in-flight requests already answered, %d sent again",
                len(event.answered),
                again,
            )
        return exhausted
