"""``headrace limits``: per-tenant rate limits and token quotas (kept in Redis, read by every
dispatcher within a quarter second), and each bucket's backlog against its bound."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.health.reach import require

if TYPE_CHECKING:
    from headrace.limits.store import LimitsStore

limits = typer.Typer(help="Per-tenant rate limits and token quotas; backlog bounds.")
console = Console()


def _store(settings: Settings) -> LimitsStore:
    from headrace import connections
    from headrace.limits.store import LimitsStore

    require(settings, "redis")
    client = connections.redis_client(settings)
    return LimitsStore(client, settings.topic_prefix, settings.quota_window_s)


@limits.command("set")
def limits_set(
    tenant: str = typer.Argument(..., help="the tenant"),
    requests_per_s: float = typer.Option(0.0, min=0, help="online requests per second (0: none)"),
    tokens_per_window: int = typer.Option(
        0, min=0, help="tokens per quota window, every lane (0: none)"
    ),
    weight: float = typer.Option(
        1.0, min=0.001, help="fair share when tenants wait for the same workers (1: equal)"
    ),
) -> None:
    """Set TENANT's limits and weight, replacing the defaults from the settings for it."""
    from headrace.limits.policy import TenantLimits

    settings = Settings()
    _store(settings).set_limits(tenant, TenantLimits(requests_per_s, tokens_per_window, weight))
    console.print(
        f"{tenant}: {requests_per_s:g} requests/s, {tokens_per_window} tokens per "
        f"{settings.quota_window_s:g}s (0: no limit), weight {weight:g}"
    )


@limits.command("clear")
def limits_clear(tenant: str = typer.Argument(..., help="the tenant")) -> None:
    """TENANT goes back to the defaults from the settings."""
    removed = _store(Settings()).clear_limits(tenant)
    console.print(f"{tenant}: " + ("defaults again" if removed else "had no limits of its own"))


@limits.command("show")
def limits_show() -> None:
    """Every tenant with limits of its own, what it used, and each bucket's backlog."""
    from headrace.limits.policy import request_rate, window_of

    settings = Settings()
    store = _store(settings)
    wall = time.time()
    table = Table(title=f"tenant limits (quota window {settings.quota_window_s:g}s)")
    for column in ("tenant", "requests/s", "rate now", "tokens / window", "tokens used", "weight"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    table.add_row(
        "(default)",
        f"{settings.tenant_requests_per_s:g}",
        "",
        str(settings.tenant_tokens_per_window),
        "",
        "1",
    )
    for tenant, own in sorted(store.overrides().items()):
        usage = store.usage(tenant, wall)
        used = usage.tokens.get(window_of(wall, settings.quota_window_s), 0)
        table.add_row(
            tenant,
            f"{own.requests_per_s:g}",
            f"{request_rate(usage, wall):.1f}",
            str(own.tokens_per_window),
            str(used),
            f"{own.weight:g}",
        )
    console.print(table)
    backlog = store.backlogs(wall)
    buckets = Table(title="online backlog per bucket")
    for column in ("bucket", "backlog", "bound"):
        buckets.add_column(column, justify="right")
    for bucket in settings.buckets:
        seen = backlog.get(bucket)
        bound = settings.backlog_bound(bucket)
        buckets.add_row(
            str(bucket),
            str(seen.backlog) if seen else "-",
            str(bound) if bound is not None else "none",
        )
    console.print(buckets)
