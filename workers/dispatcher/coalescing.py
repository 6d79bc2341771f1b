"""In-flight coalescing, for the dispatcher's core (no IO): a request identical to one
already being computed waits on that computation instead of being computed again.

Identical means the same tenant-scoped cache key (tenant, model, task, input, parameters),
the same invalidation generations, lane and priority. The first such request *leads*: it
is batched and computed as usual. The others *follow*: they hold their records (so their
offsets are committed only once each is answered) but are not batched. When the leader is
answered, its followers go out in one ``Share``: the shell answers each of them, under its
own request id and reply topic, with the result the worker wrote to the cache for the
leader. If there is none (the leader failed, was cancelled, or its result could not be
written), the shell says ``NotShared`` and the followers are computed, each on its own.
For ``RECENT_S`` after, a request identical to an answered leader (its client looked the
cache up before the result was written) is answered the same way.

Only requests that carry a cache directive are coalesced (their client reads the cache, so
the same result may serve them again, ``cache.requests.repeats``): a follower gets what a
cache hit would have given it. A follower keeps its own cancellation and deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cachetools import TTLCache

from headrace.cache.requests import shared_key
from headrace.schemas.messages import RecordRef, Request
from headrace.transport.base import Partition
from headrace.workers.dispatcher.events import RequestKey
from headrace.workers.dispatcher.flights import Pending, RefKey, ref_key

RECENT_S = 30.0  # how long an answered computation may still serve identical requests
RECENT_MAX = 10_000


def coalescing_key(pending: Pending) -> str | None:
    """What makes two requests the same computation (None: this one is never shared)."""
    request: Request = pending.item.request
    key = shared_key(request)  # the version is the leader's: the one its batch went to
    if key is None or request.cache is None:
        return None
    scopes = ",".join(f"{s}={g}" for s, g in sorted(request.cache.generations.items()))
    return f"{key}|{scopes}|{pending.lane}|{request.priority}"


@dataclass
class Group:
    """A computation and the requests waiting on it."""

    leader: Pending
    followers: list[Pending] = field(default_factory=list)
    version: str | None = None  # the model version the leader's batch went to


class Coalescer:
    def __init__(self, enabled: bool = True, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self._groups: dict[str, Group] = {}
        # computations answered lately: a request identical to one of them that its client
        # sent before the result was in the cache is answered from it too (a miss: computed)
        self._recent: TTLCache[str, Group] = TTLCache(RECENT_MAX, RECENT_S, timer=clock)
        self._key_of_leader: dict[RefKey, str] = {}
        self._followed: dict[RequestKey, str] = {}  # each follower, by its request
        self._done: list[Group] = []  # leaders answered: their followers to share with
        self.sharing: dict[RefKey, Pending] = {}  # followers whose Share is out
        self.coalesced = 0  # requests that waited on another's computation

    def __len__(self) -> int:
        """Followers waiting on a computation."""
        return len(self._followed)

    @property
    def groups(self) -> int:
        return len(self._groups)

    @property
    def busy(self) -> bool:
        """Groups formed, leaders answered, or Shares out."""
        return bool(self._groups or self._done or self.sharing)

    def attach(self, pending: Pending) -> bool:
        """True if ``pending`` follows a computation already under way (it is not to be
        batched); otherwise it leads one if it may be shared, and is batched."""
        if not self.enabled or pending.alone:
            return False
        key = coalescing_key(pending)
        if key is None:
            return False
        group = self._groups.get(key)
        if group is None and (done := self._recent.get(key)) is not None:
            self._done.append(Group(done.leader, [pending], done.version))
            self.coalesced += 1
            return True
        if group is None:
            self._groups[key] = Group(pending)
            self._key_of_leader[ref_key(pending.item.ref)] = key
            return False
        group.followers.append(pending)
        self._followed[pending.key] = key
        self.coalesced += 1
        return True

    def sent(self, refs: Iterable[RecordRef], version: str | None) -> None:
        """These requests went out in a batch for ``version``."""
        for ref in refs:
            key = self._key_of_leader.get(ref_key(ref))
            if key is not None:
                self._groups[key].version = version

    def finished(self, ref: RefKey) -> None:
        """The request of ``ref`` is answered (the flights' hook): a leader's followers are
        to be shared with; a follower's Share is over."""
        self.sharing.pop(ref, None)
        key = self._key_of_leader.pop(ref, None)
        if key is None:
            return
        group = self._groups.pop(key)
        self._recent[key] = Group(group.leader, version=group.version)
        for follower in group.followers:
            self._followed.pop(follower.key, None)
        if group.followers:
            self._done.append(group)

    def take_done(self) -> list[Group]:
        """Groups whose leader was answered since the last call (their followers are now
        ``sharing``)."""
        done, self._done = self._done, []
        for group in done:
            for follower in group.followers:
                self.sharing[ref_key(follower.item.ref)] = follower
        return done

    def not_shared(self, ref: RecordRef) -> Pending | None:
        """A follower the leader's result was not found for: to be computed on its own."""
        pending = self.sharing.pop(ref_key(ref), None)
        if pending is not None:
            pending.alone = True
            key = coalescing_key(pending)
            if key is not None:
                self._recent.pop(key, None)  # it left no result to share
        return pending

    def take(self, key: RequestKey) -> Pending | None:
        """The follower of request ``key`` no longer waits (cancelled, past its deadline)."""
        group_key = self._followed.pop(key, None)
        if group_key is None:
            return None
        group = self._groups[group_key]
        for i, follower in enumerate(group.followers):
            if follower.key == key:
                return group.followers.pop(i)
        return None

    def followers(self) -> list[Pending]:
        return [f for g in self._groups.values() for f in g.followers]

    def sweep(self, alive: Callable[[Pending], bool]) -> list[Pending]:
        """Groups whose leader is gone without an answer (its partition was taken away):
        dropped, and their followers given back, to be computed on their own."""
        released: list[Pending] = []
        for key, group in list(self._groups.items()):
            if alive(group.leader):
                continue
            del self._groups[key]
            self._key_of_leader.pop(ref_key(group.leader.item.ref), None)
            for follower in group.followers:
                self._followed.pop(follower.key, None)
                follower.alone = True
                released.append(follower)
        return released

    def forget(self, gone: set[Partition]) -> list[Pending]:
        """Followers whose partitions this dispatcher lost: dropped (their new owner reads
        them again)."""
        dropped: list[Pending] = []
        for group in self._groups.values():
            kept = []
            for follower in group.followers:
                if follower.partition in gone:
                    self._followed.pop(follower.key, None)
                    dropped.append(follower)
                else:
                    kept.append(follower)
            group.followers = kept
        for refkey, pending in list(self.sharing.items()):
            if pending.partition in gone:
                del self.sharing[refkey]
                dropped.append(pending)
        return dropped
