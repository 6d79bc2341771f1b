"""Per-tenant usage in the SQL store: minutes moved from Redis (``flush``), and the totals a
report or the gateway serves (``totals``).

``flush`` applies each taken minute and records its flush key in one transaction, so a
minute is added once even when a flusher dies between the commit and clearing Redis (the
next pass finds the key recorded and only clears it). The gateway flushes on a schedule;
``headrace cost report`` flushes before it reads.
"""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

from sqlalchemy import BigInteger, Float, String, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, Session, mapped_column

from headrace.jobs.store import JobStore
from headrace.sql import Base as _Base
from headrace.sql import UTCDateTime
from headrace.usage.meter import Totals, UsageMeter, totals_by_tenant

log = logging.getLogger(__name__)


class TenantUsage(_Base):
    __tablename__ = "tenant_usage"

    tenant: Mapped[str] = mapped_column(String(200), primary_key=True)
    minute: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    device_ms: Mapped[float] = mapped_column(Float, default=0.0)
    cache_hits: Mapped[int] = mapped_column(BigInteger, default=0)


class UsageFlush(_Base):
    __tablename__ = "usage_flushes"

    flush_key: Mapped[str] = mapped_column(String(400), primary_key=True)
    applied_at: Mapped[datetime] = mapped_column(UTCDateTime)


DURATION = re.compile(r"(\d{1,6})([smhd])")
UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds_of(duration: str) -> int:
    """``90s``, ``30m``, ``1h``, ``7d`` in seconds; ValueError for anything else."""
    match = DURATION.fullmatch(duration.strip())
    if match is None:
        raise ValueError(f"{duration!r}: a duration such as 90s, 30m, 1h or 7d")
    return int(match[1]) * UNIT_S[match[2]]


def flush(store: JobStore, meter: UsageMeter, closed_after_s: float | None = None) -> int:
    """Move every closed minute from Redis to SQL; returns how many were applied now."""
    taken = meter.take_closed() if closed_after_s is None else meter.take_closed(closed_after_s)
    applied = 0
    for t in taken:
        try:
            with Session(store.engine) as s, s.begin():
                if s.get(UsageFlush, t.flush_key) is None:
                    s.add(UsageFlush(flush_key=t.flush_key, applied_at=datetime.now(UTC)))
                    row = s.get(TenantUsage, (t.tenant, t.minute), with_for_update=True)
                    if row is None:
                        row = TenantUsage(
                            tenant=t.tenant,
                            minute=t.minute,
                            requests=0,
                            tokens=0,
                            device_ms=0.0,
                            cache_hits=0,
                        )
                        s.add(row)
                    row.requests += t.totals.requests
                    row.tokens += t.totals.tokens
                    row.device_ms += t.totals.device_ms
                    row.cache_hits += t.totals.cache_hits
                    applied += 1
        except IntegrityError:  # another flusher made the row first: the next pass adds it
            log.info("usage minute %s:%d raced another flusher; later", t.tenant, t.minute)
            continue
        meter.applied(t)
    return applied


def totals(
    store: JobStore, meter: UsageMeter | None, since: datetime, tenant: str | None = None
) -> dict[str, Totals]:
    """Per tenant since ``since``: the SQL store's minutes and, with ``meter``, the minutes
    Redis still counts into."""
    since_minute = int(since.timestamp() // 60)
    query = (
        select(
            TenantUsage.tenant,
            func.sum(TenantUsage.requests),
            func.sum(TenantUsage.tokens),
            func.sum(TenantUsage.device_ms),
            func.sum(TenantUsage.cache_hits),
        )
        .where(TenantUsage.minute >= since_minute)
        .group_by(TenantUsage.tenant)
    )
    if tenant is not None:
        query = query.where(TenantUsage.tenant == tenant)
    with Session(store.engine) as s:
        rows = [
            (name, Totals(int(r or 0), int(t or 0), float(d or 0), int(c or 0)))
            for name, r, t, d, c in s.execute(query)
        ]
    if meter is not None:
        rows += [
            (t.tenant, t.totals)
            for t in meter.still_open(since_minute)
            if tenant is None or t.tenant == tenant
        ]
    return totals_by_tenant(rows)
