"""The check before producing (the SDK's ``Client`` and so the gateway): refuse at once an
online request to a bucket past its backlog bound, or of a tenant already over its limits,
from the counts the dispatchers keep in Redis. It only reads: the dispatchers count and
enforce, so a request this lets through past a limit is still refused there.

What it reads is kept briefly (``BACKLOG_CACHE_S``, ``TENANT_CACHE_S``) and then read again
on a thread of its own while checks go on with what was read (``limits/refreshed.py``): a
check waits for Redis only for a tenant it has not seen for ``STALE_S`` (a lone request's
latency had a Redis round trip in it every other request). Redis out of reach opens the
gate for ``OPEN_AFTER_ERROR_S`` (the dispatcher still enforces): a check never fails or
slows a request for want of Redis.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import redis

from headrace.config.settings import Settings
from headrace.connections import REDIS_ERRORS
from headrace.limits.policy import TenantLimits, TenantUsage, overloaded, refusal, shed_bound
from headrace.limits.refreshed import Refresh, Refreshed
from headrace.limits.store import BucketBacklog, LimitsStore
from headrace.schemas.errors import (
    ErrorCode,
    ErrorInfo,
    LimitedError,
    OverloadedError,
    QuotaExceededError,
    RateLimitedError,
)
from headrace.schemas.topics import Lane

log = logging.getLogger(__name__)

BACKLOG_CACHE_S = 0.5
TENANT_CACHE_S = 0.1
STALE_S = 2.0  # older than this (unchecked that long), a read is waited for
OPEN_AFTER_ERROR_S = 10.0

_RAISED: dict[ErrorCode, type[LimitedError]] = {
    ErrorCode.overloaded: OverloadedError,
    ErrorCode.rate_limited: RateLimitedError,
    ErrorCode.quota_exceeded: QuotaExceededError,
}


def limited_error(error: ErrorInfo) -> LimitedError:
    """The exception for a refusal (the gate's, or an error reply of the same code)."""
    return _RAISED[error.code](error.message, error.retry_after_s or 1.0)


class Gate:
    def __init__(
        self,
        client: redis.Redis,
        settings: Settings,
        wall_clock: Callable[[], float] = time.time,
        refresh_in: Refresh | None = None,
    ) -> None:
        """``refresh_in``: runs a read again beside the checks (by default on a thread of
        the gate's own)."""
        self.settings = settings
        self.store = LimitsStore(client, settings.topic_prefix, settings.quota_window_s)
        self.wall_clock = wall_clock
        self.defaults = TenantLimits(
            settings.tenant_requests_per_s, settings.tenant_tokens_per_window
        )
        self._pool: ThreadPoolExecutor | None = None
        if refresh_in is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="limits-gate")
            refresh_in = self._pool.submit
        self._backlogs: Refreshed[str, dict[int, BucketBacklog]] = Refreshed(
            BACKLOG_CACHE_S, STALE_S, refresh_in, wall_clock, maxsize=1
        )
        self._tenants: Refreshed[str, tuple[TenantLimits, TenantUsage]] = Refreshed(
            TENANT_CACHE_S, STALE_S, refresh_in, wall_clock
        )
        self._open_until = 0.0

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.store.redis.close()

    def check(
        self, tenant: str, bucket: int, tokens: int, lane: Lane, sheddable: bool = False
    ) -> None:
        """Raise the ``LimitedError`` that refuses this request now, if one does
        (``sheddable``: overloaded at its share of the backlog bound)."""
        if lane != "online" or time.monotonic() < self._open_until:
            return  # bulk work waits in its lane; the dispatcher counts its tokens
        try:
            problem = self._problem(tenant, bucket, tokens, sheddable)
        except REDIS_ERRORS as exc:
            self._open_until = time.monotonic() + OPEN_AFTER_ERROR_S
            log.warning(
                "limits not checked for %.0f s: Redis unreachable (%s)", OPEN_AFTER_ERROR_S, exc
            )
            return
        if problem is not None:
            raise limited_error(problem)

    def _problem(
        self, tenant: str, bucket: int, tokens: int, sheddable: bool = False
    ) -> ErrorInfo | None:
        wall = self.wall_clock()
        full = self.settings.backlog_bound(bucket)
        bound = shed_bound(full, sheddable) if full is not None else None
        if bound is not None:
            backlogs = self._backlogs.get("all", lambda: self.store.backlogs(self.wall_clock()))
            seen = backlogs.get(bucket)
            if seen is not None and seen.backlog >= bound:
                drain = (seen.backlog - bound + 1) * seen.drain_s
                return overloaded(bucket, seen.backlog, bound, drain, sheddable)
        limits, usage = self._tenants.get(tenant, lambda: self._read_tenant(tenant))
        if not limits.limited:
            return None
        return refusal(limits, usage, wall, self.settings.quota_window_s, tokens)

    def _read_tenant(self, tenant: str) -> tuple[TenantLimits, TenantUsage]:
        limits = self.store.overrides().get(tenant, self.defaults)
        usage = self.store.usage(tenant, self.wall_clock()) if limits.limited else TenantUsage()
        return limits, usage
