"""Tenants' limits and the backlog bound, as the dispatcher's core applies them (no IO).

Tenants: the counts every dispatcher wrote to Redis (as last synced) plus what this one
admitted since; the core asks for a sync (``SyncLimits``) every ``SYNC_INTERVAL_S`` and the
shell answers with the counts and the overrides (``LimitsSynced``). Between two syncs other
dispatchers' admissions are not seen: with N dispatchers a tenant may pass its rate by up to
N x rate x ``SYNC_INTERVAL_S`` requests (one dispatcher: exact).

The backlog: a bucket's online records not yet answered over every dispatcher (published
each second, ``BacklogSeen``), less the ones refused since, or the ones this dispatcher
holds if those are more (it reads ahead: ``fair``). Past its bound, an online record read
is answered ``overloaded``: the oldest go first, until the backlog is under the bound.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from headrace.limits.policy import (
    TenantLimits,
    TenantUsage,
    overloaded,
    refusal,
    second_of,
    shed_bound,
    window_of,
)
from headrace.schemas.errors import ErrorInfo
from headrace.schemas.topics import Lane

SYNC_INTERVAL_S = 0.25
TENANT_FORGOTTEN_S = 60.0  # a tenant not seen this long is read no more


@dataclass(frozen=True)
class LimitsPolicy:
    defaults: TenantLimits = field(default_factory=TenantLimits)
    window_s: float = 3600.0
    bounds: Mapping[int, int] = field(default_factory=dict)  # bucket -> most online backlog


class Quotas:
    def __init__(
        self,
        policy: LimitsPolicy,
        drain_s: Callable[[int], float],
        clock: Callable[[], float],
        own_backlog: Callable[[int], int] = lambda _: 0,
    ) -> None:
        """``drain_s(bucket)``: seconds the bucket's live workers need per request;
        ``own_backlog(bucket)``: its online requests this dispatcher holds unanswered (the
        bound holds even before a backlog is published: a dispatcher reads ahead)."""
        self.policy = policy
        self.drain_s = drain_s
        self.own_backlog = own_backlog
        self.clock = clock
        self.overrides: dict[str, TenantLimits] = {}
        self.synced: dict[str, TenantUsage] = {}
        self.local: dict[str, TenantUsage] = {}
        self.sending: dict[str, TenantUsage] = {}  # taken for a sync not yet answered
        self.seen: dict[str, float] = {}  # tenant -> monotonic time last seen
        self.backlog: dict[int, int] = {}
        self._synced_at = -1e9
        self._syncing = False

    def limits_of(self, tenant: str) -> TenantLimits:
        return self.overrides.get(tenant, self.policy.defaults)

    def weight(self, tenant: str) -> float:
        """The tenant's fair share (its limits' weight)."""
        return self.limits_of(tenant).weight

    # --- checks ---------------------------------------------------------------------------------
    def refusal(
        self,
        tenant: str,
        bucket: int | None,
        tokens: int,
        lane: Lane,
        wall: float,
        sheddable: bool = False,
    ) -> ErrorInfo | None:
        """Why this request may not be admitted (None: it may; then ``admitted`` counts it).
        ``sheddable``: refused at its share of the backlog bound, before the others."""
        self.seen[tenant] = self.clock()
        if lane == "online" and bucket is not None:
            full = self.policy.bounds.get(bucket)
            backlog = self.backlog.get(bucket, 0)
            if full:  # what is published, or what this dispatcher holds if that is more
                backlog = max(backlog, self.own_backlog(bucket))
            bound = shed_bound(full, sheddable) if full else None
            if bound and backlog > bound:
                self.backlog[bucket] = backlog - 1  # this one is answered now
                drain = (backlog - bound) * self.drain_s(bucket)
                return overloaded(bucket, backlog, bound, drain, sheddable)
        limits = self.limits_of(tenant)
        if not limits.limited:
            return None
        usage = TenantUsage()
        for counts in (self.synced, self.sending, self.local):
            usage = usage.add(counts.get(tenant, TenantUsage()))
        return refusal(
            limits, usage, wall, self.policy.window_s, tokens, count_rate=lane == "online"
        )

    def admitted(self, tenant: str, tokens: int, lane: Lane, wall: float) -> None:
        if not self.limits_of(tenant).limited:
            return
        local = self.local.setdefault(tenant, TenantUsage())
        if lane == "online":
            second = second_of(wall)
            local.requests[second] = local.requests.get(second, 0) + 1
        window = window_of(wall, self.policy.window_s)
        local.tokens[window] = local.tokens.get(window, 0) + tokens

    # --- syncing with the others ----------------------------------------------------------------
    def due(self) -> bool:
        return not self._syncing and self.clock() - self._synced_at >= SYNC_INTERVAL_S

    def take_unsynced(self) -> tuple[dict[str, TenantUsage], list[str]]:
        """What to add to the shared counts, and the tenants to read back."""
        now = self.clock()
        self._syncing, self._synced_at = True, now
        for tenant in [t for t, at in self.seen.items() if now - at > TENANT_FORGOTTEN_S]:
            del self.seen[tenant]
            self.synced.pop(tenant, None)
        self.sending, self.local = self.local, {}
        return dict(self.sending), sorted(self.seen)

    def synced_with(
        self, usage: Mapping[str, TenantUsage], overrides: Mapping[str, TenantLimits]
    ) -> None:
        self._syncing, self.sending = False, {}
        self.overrides = dict(overrides)
        self.synced.update(usage)

    def not_synced(self, deltas: Mapping[str, TenantUsage]) -> None:
        """Redis refused the sync: the counts stay local, to be added next time."""
        self._syncing, self.sending = False, {}
        for tenant, usage in deltas.items():
            self.local[tenant] = usage.add(self.local.get(tenant, TenantUsage()))

    def backlog_seen(self, backlog: Mapping[int, int]) -> None:
        self.backlog = dict(backlog)

    def answered(self, bucket: int, n: int) -> None:
        """``n`` online requests of ``bucket`` were answered since the backlog was seen."""
        if bucket in self.backlog:
            self.backlog[bucket] = max(0, self.backlog[bucket] - n)
