"""Limits and their counts in Redis, shared by every dispatcher, gateway and client.

Keys (the tenant is in every key of a tenant's data):

- ``<prefix>:limits`` hash, field = tenant, value = JSON ``TenantLimits``: the per-tenant
  overrides (``headrace limits set``); ``<prefix>:limits:version`` changes with each edit, so
  readers fetch the hash only when it changed;
- ``<prefix>:rate:<tenant>:<unix second>``: online requests admitted in that second;
- ``<prefix>:quota:<tenant>:<window>``: tokens admitted in that quota window;
- ``<prefix>:backlog`` hash, field = ``<bucket>:<dispatcher id>``, value = JSON
  ``{"backlog", "drain_s", "at"}``: each dispatcher's share of a bucket's online backlog,
  published once a second (a share older than ``BACKLOG_FRESH_S`` is ignored, and removed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import redis

from headrace.limits.policy import TenantLimits, TenantUsage, second_of, window_of

log = logging.getLogger(__name__)

RATE_TTL_S = 5
_UNREAD = object()  # the overrides' version before the first read
BACKLOG_FRESH_S = 3.0
BACKLOG_FORGOTTEN_S = 60.0


@dataclass(frozen=True)
class BucketBacklog:
    """A bucket's online backlog over every live dispatcher, and seconds of work per record
    for the bucket's live workers (how fast the backlog drains)."""

    backlog: int
    drain_s: float


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class LimitsStore:
    def __init__(self, client: redis.Redis, prefix: str, window_s: float) -> None:
        self.redis = client
        self.prefix = prefix
        self.window_s = window_s
        self._limits_key = f"{prefix}:limits"
        self._version_key = f"{prefix}:limits:version"
        self._backlog_key = f"{prefix}:backlog"
        self._overrides: dict[str, TenantLimits] = {}
        self._overrides_version: object = _UNREAD

    # --- per-tenant overrides ------------------------------------------------------------------
    def set_limits(self, tenant: str, limits: TenantLimits) -> None:
        with self.redis.pipeline() as pipe:
            pipe.hset(self._limits_key, tenant, json.dumps(asdict(limits)))
            pipe.incr(self._version_key)
            pipe.execute()

    def clear_limits(self, tenant: str) -> bool:
        with self.redis.pipeline() as pipe:
            pipe.hdel(self._limits_key, tenant)
            pipe.incr(self._version_key)
            removed, _ = pipe.execute()
        return bool(removed)

    def overrides(self) -> dict[str, TenantLimits]:
        """Every tenant's override; the hash is read again only when its version moved."""
        version = self.redis.get(self._version_key)  # None until the first edit: none yet
        if version != self._overrides_version:
            raw = self.redis.hgetall(self._limits_key)
            read: dict[str, TenantLimits] = {}
            for tenant, value in raw.items():
                try:
                    read[_text(tenant)] = TenantLimits(**json.loads(_text(value)))
                except (ValueError, TypeError) as exc:  # hand-edited: that tenant's defaults
                    log.warning("limits of %r unreadable (%s): the defaults apply", tenant, exc)
            # whole at once: a reader on another thread (the gate's reload) sees old or new
            self._overrides, self._overrides_version = read, version
            log.info("tenant limits read: %s", ", ".join(sorted(self._overrides)) or "none")
        return dict(self._overrides)

    # --- counts ----------------------------------------------------------------------------------
    def _rate_key(self, tenant: str, second: int) -> str:
        return f"{self.prefix}:rate:{tenant}:{second}"

    def _quota_key(self, tenant: str, window: int) -> str:
        return f"{self.prefix}:quota:{tenant}:{window}"

    def sync(
        self, deltas: Mapping[str, TenantUsage], tenants: Iterable[str], wall: float
    ) -> dict[str, TenantUsage]:
        """Add ``deltas`` (counted where they happened), then read the counts every check
        at ``wall`` needs for each of ``tenants`` and the tenants of ``deltas``: one round
        trip."""
        window_ttl = int(self.window_s * 2) + 60
        pipe = self.redis.pipeline(transaction=False)
        for tenant, usage in deltas.items():
            for second, n in usage.requests.items():
                pipe.incrby(self._rate_key(tenant, second), n)
                pipe.expire(self._rate_key(tenant, second), RATE_TTL_S)
            for window, n in usage.tokens.items():
                pipe.incrby(self._quota_key(tenant, window), n)
                pipe.expire(self._quota_key(tenant, window), window_ttl)
        written = len(pipe)
        names = sorted(set(tenants) | set(deltas))
        second, window = second_of(wall), window_of(wall, self.window_s)
        for tenant in names:
            pipe.mget(
                self._rate_key(tenant, second - 1),
                self._rate_key(tenant, second),
                self._quota_key(tenant, window),
            )
        results = pipe.execute()[written:]
        out = {}
        for tenant, (previous, current, tokens) in zip(names, results, strict=True):
            out[tenant] = TenantUsage(
                requests={second - 1: int(previous or 0), second: int(current or 0)},
                tokens={window: int(tokens or 0)},
            )
        return out

    def usage(self, tenant: str, wall: float) -> TenantUsage:
        return self.sync({}, [tenant], wall)[tenant]

    # --- the backlog ----------------------------------------------------------------------------
    def publish_backlog(
        self, dispatcher_id: str, shares: Mapping[int, BucketBacklog], wall: float
    ) -> dict[int, BucketBacklog]:
        """Publish this dispatcher's share of each bucket's backlog; returns every bucket's
        backlog over every dispatcher whose share is fresh (one round trip, and a second
        one to remove shares of dispatchers gone for a minute)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for bucket, share in shares.items():
                value = {"backlog": share.backlog, "drain_s": share.drain_s, "at": wall}
                pipe.hset(self._backlog_key, f"{bucket}:{dispatcher_id}", json.dumps(value))
            pipe.hgetall(self._backlog_key)
            raw = pipe.execute()[-1]
        totals, stale = _sum_shares(raw, wall)
        if stale:
            self.redis.hdel(self._backlog_key, *stale)
        return totals

    def backlogs(self, wall: float) -> dict[int, BucketBacklog]:
        totals, _ = _sum_shares(self.redis.hgetall(self._backlog_key), wall)
        return totals

    def withdraw_backlog(self, dispatcher_id: str, buckets: Iterable[int]) -> None:
        self.redis.hdel(self._backlog_key, *(f"{b}:{dispatcher_id}" for b in buckets))


def _sum_shares(raw: Mapping[Any, Any], wall: float) -> tuple[dict[int, BucketBacklog], list[str]]:
    backlog: dict[int, int] = {}
    drain: dict[int, float] = {}
    stale = []
    for field_name, value in raw.items():
        name = _text(field_name)
        share = json.loads(_text(value))
        age = wall - float(share["at"])
        if age > BACKLOG_FORGOTTEN_S:
            stale.append(name)
        if age > BACKLOG_FRESH_S:
            continue
        bucket = int(name.split(":", 1)[0])
        backlog[bucket] = backlog.get(bucket, 0) + int(share["backlog"])
        drain[bucket] = max(drain.get(bucket, 0.0), float(share["drain_s"]))
    return {b: BucketBacklog(backlog[b], drain[b]) for b in backlog}, stale
