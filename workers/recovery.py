"""Batches that went wrong after the dispatcher sent them: a worker died computing one, one
ran past its lease, or Redis lost its data (queues, claims, notices) under all of them.
Kafka is the truth: a request whose reply is on its reply topic is done; the rest are sent
again, split in halves when their batch failed, until one failing alone is dead-lettered."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from pydantic import ValidationError

from headrace.config.settings import Settings
from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import Reply
from headrace.transport.kafka.scan import records_from_start
from headrace.workers import metrics
from headrace.workers.error_replies import ErrorReplies
from headrace.workers.flights import DispatcherStats, Flights, InFlight, Pending, RequestKey
from headrace.workers.ledger import SENDING_PREFIX, Ledger

log = logging.getLogger(__name__)

LEASE_HARD_FACTOR = 3  # a live worker may hold a batch this many leases before it is resent

LiveWorkers = dict[int, set[str]]  # bucket -> workers with a recent heartbeat


class Recovery:
    def __init__(
        self,
        settings: Settings,
        ledger: Ledger,
        flights: Flights,
        errors: ErrorReplies,
        stats: DispatcherStats,
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.flights = flights
        self.errors = errors
        self.stats = stats
        self.clock = clock
        self._epoch: str | None = None

    # --- batches past their lease ---------------------------------------------------------
    def check_leases(self, live: LiveWorkers) -> None:
        """A batch no worker has started within its lease is sent again (its first copy may
        sit in a lost queue). One a live worker is computing keeps its lease, up to
        LEASE_HARD_FACTOR leases: its claims keep a second copy from computing meanwhile."""
        now = self.clock()
        everyone = set().union(*live.values())
        for batch_id, flight in list(self.flights.in_flight.items()):
            if flight.lease_deadline > now:
                continue
            if flight.runner is not None and flight.runner in everyone:
                overdue = now - flight.lease_deadline
                if overdue < (LEASE_HARD_FACTOR - 1) * flight.lease_s:
                    continue
            elif flight.runner is None and not live.get(flight.bucket):
                # no worker to take it: sending it again would change nothing, and it is not
                # the request's fault (a lost queue is caught by the Redis epoch check)
                flight.lease_deadline = now + flight.lease_s
                continue
            del self.flights.in_flight[batch_id]
            log.warning("batch %s ran past its lease (runner %s)", batch_id, flight.runner)
            # never started: its copy sat in a queue or was lost with a worker that died
            # before claiming it; that says nothing about its requests, so it is not counted
            self.redeliver(flight, counted=flight.runner is not None)

    # --- workers that died ------------------------------------------------------------------
    def check_runners(self, live: LiveWorkers) -> None:
        """Learn which worker runs each batch; recover the batches of workers now dead."""
        if not self.flights.in_flight:
            return
        everyone = set().union(*live.values())
        batch_ids = list(self.flights.in_flight)
        for batch_id, runner in zip(batch_ids, self.ledger.runners(batch_ids), strict=True):
            flight = self.flights.in_flight[batch_id]
            flight.runner = runner or flight.runner
            if flight.runner is None or flight.runner in everyone:
                continue
            del self.flights.in_flight[batch_id]
            log.warning("worker %s died computing batch %s", flight.runner, batch_id)
            self._recover_dead_attempt(batch_id, flight)

    def _recover_dead_attempt(self, batch_id: str, flight: InFlight) -> None:
        """Requests it was still computing are released and sent again; for those whose
        replies it was sending, the reply topic says whether they went out."""
        alive = self.flights.alive(flight)
        holders = self.ledger.holders([p.key for p in alive])
        sending = [
            p for p, h in zip(alive, holders, strict=True) if h and h.startswith(SENDING_PREFIX)
        ]
        self._settle(sending)
        self.ledger.release([p.key for p in self.flights.alive(flight)], owner=batch_id)
        self.ledger.end_batch(batch_id)
        self.redeliver(flight)

    # --- Redis data loss --------------------------------------------------------------------
    def check_epoch(self) -> None:
        epoch = self.ledger.epoch(uuid.uuid4().hex)
        if self._epoch is not None and epoch != self._epoch:
            self._recover_lost_state()
        self._epoch = epoch

    def _recover_lost_state(self) -> None:
        """Redis came back empty: the Celery queues, claims, completion notices and answered
        marks are gone. Requests whose reply is on their reply topic are done (and marked
        again); the others are sent again."""
        self.stats.redis_recoveries += 1
        flights = list(self.flights.in_flight.values())
        self.flights.in_flight.clear()
        for flight in flights:
            self.flights.uncount(flight)
        before = sum(len(self.flights.alive(f)) for f in flights)
        self._settle([p for flight in flights for p in self.flights.alive(flight)])
        resent = 0
        for flight in flights:
            again = self.flights.alive(flight)
            if again:
                resent += len(again)
                self.flights.ready[flight.bucket].appendleft(again)
        log.warning(
            "Redis lost its data: %d in-flight requests already answered, %d sent again",
            before - resent,
            resent,
        )

    # --- shared -----------------------------------------------------------------------------
    def _settle(self, pendings: list[Pending]) -> None:
        """Those of ``pendings`` with a reply on their reply topic (read from its start) are
        finished and marked answered again; the others stay unanswered."""
        if not pendings:
            return
        wanted: dict[str, set[RequestKey]] = {}
        for p in pendings:
            wanted.setdefault(p.item.request.reply_to, set()).add(p.key)
        found: set[RequestKey] = set()
        for topic, keys in wanted.items():
            for record in records_from_start(self.settings, topic):
                try:
                    reply = Reply.model_validate_json(record.value)
                except ValidationError:
                    continue
                if (reply.tenant, reply.request_id) in keys:
                    found.add((reply.tenant, reply.request_id))
        log.info("reply scan: %d of %d requests already answered", len(found), len(pendings))
        self.ledger.mark_answered(sorted(found))
        for p in pendings:
            if p.key in found:
                self.flights.finish(p.item.ref)

    def redeliver(self, flight: InFlight, counted: bool = True) -> None:
        """Send a crashed or late batch's unanswered requests again, split in halves so a
        request that kills its batch ends up alone; failing alone ``max_attempts`` times, it
        is dead-lettered with ``redelivery_exhausted``. ``counted``: the attempt failed while
        a worker computed it (else it is sent again as it was, with no failure counted)."""
        self.flights.uncount(flight)
        alive = self.flights.alive(flight)
        if not alive:
            return
        self.stats.redispatched += 1
        metrics.REDISPATCHED.inc()
        ready = self.flights.ready[flight.bucket]
        if not counted:
            ready.appendleft(alive)
            return
        for p in alive:
            p.failures += 1
        if len(alive) == 1:
            alive[0].solo_failures += 1
            if alive[0].solo_failures >= self.settings.max_attempts:
                self._exhaust(alive[0], flight.bucket)
                return
        half = (len(alive) + 1) // 2
        for part in (alive[:half], alive[half:]):
            if part:
                ready.appendleft(part)

    def _exhaust(self, pending: Pending, bucket: int) -> None:
        request, ref = pending.item.request, pending.item.ref
        message = (
            f"its batch crashed or ran past its lease {pending.failures} times, "
            f"{pending.solo_failures} of them with this request alone"
        )
        info = ErrorInfo(code=ErrorCode.redelivery_exhausted, message=message)
        if not self.errors.reply(
            request.reply_to, request.request_id, pending.key, request.model, info, ref
        ):
            self.flights.ready[bucket].append([pending])  # still being computed
            return
        self.stats.exhausted += 1
        log.error("request %s dead-lettered: %s", request.request_id, message)
        self.errors.dead_letter(ref, info, request.model_dump_json())
