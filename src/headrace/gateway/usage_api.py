"""``GET /v1/usage?since=1h``: the calling tenant's own usage (requests computed, tokens,
device-seconds, cache hits) since then, a headrace extension. A tenant sees only its own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter

from headrace.gateway.api import ApiError, Tenant
from headrace.jobs.store import JobStore
from headrace.jobs.usage import seconds_of, totals
from headrace.usage.meter import Totals, UsageMeter

MAX_SINCE_S = 90 * 86400


def usage_object(tenant: str, since: datetime, t: Totals) -> dict[str, Any]:
    return {
        "object": "usage",
        "tenant": tenant,
        "since": int(since.timestamp()),
        "requests": t.requests,
        "tokens": t.tokens,
        "device_seconds": round(t.device_ms / 1000, 6),
        "cache_hits": t.cache_hits,
    }


def usage_router(store: JobStore, meter: UsageMeter) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/usage")
    def get_usage(tenant: Tenant, since: str = "1h") -> dict[str, Any]:
        try:
            seconds = seconds_of(since)
        except ValueError as exc:
            raise ApiError(400, str(exc), "invalid_value", param="since") from exc
        if not 0 < seconds <= MAX_SINCE_S:
            raise ApiError(400, "since: between 1s and 90d", "invalid_value", param="since")
        start = datetime.now(UTC) - timedelta(seconds=seconds)
        mine = totals(store, meter, start, tenant=tenant).get(tenant, Totals())
        return usage_object(tenant, start, mine)

    return router
