"""Requests that wait on an identical one's computation, in the dispatcher's core (no IO):
what the core does with its ``Coalescer``'s outcomes. A leader answered shares its result
with its followers (``Share``); a follower cancelled, past its deadline, or whose leader is
gone unanswered is answered so, or computed on its own."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from cachetools import FIFOCache

from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import RecordRef
from headrace.schemas.topics import Lane
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.coalescing import Coalescer
from headrace.workers.dispatcher.fair import FairBatcher
from headrace.workers.dispatcher.flights import DispatcherStats, Flights, Pending, ref_key
from headrace.workers.dispatcher.refusals import Refusals

SWEEP_S = 0.2  # how often waiting followers are checked (deadlines, lost leaders)


class Followers:
    def __init__(
        self,
        coalescer: Coalescer,
        flights: Flights,
        batchers: Mapping[tuple[int, Lane], FairBatcher[Pending]],
        bucket_of_topic: Mapping[str, int | None],
        refusals: Refusals,
        cancelled: FIFOCache[ev.RequestKey, None],
        stats: DispatcherStats,
        clock: Callable[[], float],
        wall_clock: Callable[[], float],
    ) -> None:
        self.coalescer = coalescer
        self.flights = flights
        self.batchers = batchers
        self.bucket_of_topic = bucket_of_topic
        self.refusals = refusals
        self.cancelled = cancelled
        self.stats = stats
        self.clock = clock
        self.wall_clock = wall_clock
        self._swept = clock()
        flights.on_finish = coalescer.finished

    @property
    def active(self) -> bool:
        return self.coalescer.busy

    def after(self, out: list[ev.Action]) -> None:
        """After each event: batches just sent tell their leaders' versions; leaders just
        answered share their result with their followers (a cancelled one is answered so)."""
        for action in out:
            if isinstance(action, ev.SendBatch) and not action.shadow:
                refs = (item.ref for item in action.batch.items)
                self.coalescer.sent(refs, action.batch.model_version)
        for group in self.coalescer.take_done():
            answers = []
            for follower in group.followers:
                if follower.key in self.cancelled:
                    self.coalescer.sharing.pop(ref_key(follower.item.ref), None)
                    out.append(self._cancelled(follower))
                else:
                    answers.append(self.refusals.dropped(follower, self._bucket(follower), None))
            if answers:
                out.append(ev.Share(group.leader.item.request, group.version, answers))

    def not_shared(self, refs: Sequence[RecordRef]) -> None:
        """Followers their leader's result could not serve: computed on their own."""
        for ref in refs:
            self.refusals.delivered(ref)
            pending = self.coalescer.not_shared(ref)
            if pending is not None:
                self._compute_alone(pending)

    def sweep(self, out: list[ev.Action]) -> None:
        """Every ``SWEEP_S``: followers past their deadline are answered so; those whose
        leader is gone unanswered (its partition taken away) are computed on their own."""
        now = self.clock()
        if not self.coalescer.groups or now - self._swept < SWEEP_S:
            return
        self._swept = now
        for pending in self.coalescer.sweep(lambda p: bool(self.flights.alive([p]))):
            self._compute_alone(pending)
        wall = self.wall_clock()
        for follower in self.coalescer.followers():
            deadline = follower.item.request.deadline
            if deadline is not None and deadline.timestamp() <= wall:
                message = "deadline passed while it waited on an identical request's compute"
                error = ErrorInfo(code=ErrorCode.deadline_exceeded, message=message)
                self.drop(follower.key, out, error)

    def drop(
        self, key: ev.RequestKey, out: list[ev.Action], error: ErrorInfo | None = None
    ) -> None:
        """The follower of request ``key``, if one waits, is answered with ``error`` (None:
        cancelled) instead of its leader's result."""
        follower = self.coalescer.take(key)
        if follower is None:
            return
        if error is None:
            out.append(self._cancelled(follower))
        else:
            out.append(self.refusals.dropped(follower, self._bucket(follower), error))

    def _cancelled(self, follower: Pending) -> ev.Answer:
        self.stats.cancelled += 1
        return self.refusals.cancelled(follower, self._bucket(follower))

    def _compute_alone(self, pending: Pending) -> None:
        if not self.flights.alive([pending]):
            return
        bucket = self._bucket(pending)
        for batch in self.batchers[bucket, pending.lane].add(pending, pending.tokens):
            self.flights.queue(bucket, batch)

    def _bucket(self, pending: Pending) -> int:
        bucket = self.bucket_of_topic[pending.item.ref.topic]
        assert bucket is not None  # admitted from a bucket's topic
        return bucket
