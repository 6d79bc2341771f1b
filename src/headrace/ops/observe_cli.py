"""``headrace top`` and ``headrace cost report``: watching a pipeline, and what each tenant
used."""

from __future__ import annotations

import contextlib
import json

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.health.reach import require

cost = typer.Typer(help="What each tenant used: requests, tokens, device time, cache hits.")
console = Console()
errors = Console(stderr=True)


@cost.command("report")
def cost_report(
    since: str = typer.Option("1h", help="how far back: 90s, 30m, 1h, 7d"),
    tenant: str | None = typer.Option(None, help="only this tenant"),
    as_json: bool = typer.Option(False, "--json", help="one JSON object per tenant"),
) -> None:
    """Per tenant since SINCE: requests computed, tokens, device-seconds (each request's
    share of its batch's compute, split by padded tokens) and cache hits. Closed minutes are
    moved from Redis to the SQL store first; the current ones are read from Redis."""
    from datetime import UTC, datetime, timedelta

    from headrace import connections
    from headrace.jobs.store import JobStore
    from headrace.jobs.usage import flush, seconds_of, totals
    from headrace.usage.meter import UsageMeter

    try:
        start = datetime.now(UTC) - timedelta(seconds=seconds_of(since))
    except ValueError as exc:
        errors.print(f"[red]error:[/red] --since {exc}")
        raise typer.Exit(2) from exc
    settings = Settings()
    require(settings, "sql", "redis")
    store = JobStore(settings.sql_url)
    meter = UsageMeter(connections.redis_client(settings), settings.topic_prefix)
    flush(store, meter)
    rows = sorted(totals(store, meter, start, tenant).items())
    if as_json:
        for name, t in rows:
            record = {"tenant": name, "requests": t.requests, "tokens": t.tokens}
            record |= {"device_seconds": round(t.device_ms / 1000, 6), "cache_hits": t.cache_hits}
            print(json.dumps(record))
        return
    table = Table(title=f"usage since {start:%Y-%m-%d %H:%M:%S} UTC")
    for column in ("tenant", "requests", "tokens", "device-s", "device-ms / request", "cache hits"):
        table.add_column(column, justify="left" if column == "tenant" else "right")
    for name, t in rows:
        per = t.device_ms / t.requests if t.requests else 0.0
        table.add_row(
            name,
            f"{t.requests:,}",
            f"{t.tokens:,}",
            f"{t.device_ms / 1000:,.3f}",
            f"{per:,.2f}",
            f"{t.cache_hits:,}",
        )
    if not rows:
        console.print(f"no usage since {start:%Y-%m-%d %H:%M:%S} UTC")
    else:
        console.print(table)


def top(
    target: list[str] = typer.Option(
        [], help="a process's metrics URL, e.g. http://127.0.0.1:9101 (repeatable)"
    ),
    interval_s: float = typer.Option(2.0, help="seconds between refreshes"),
    once: bool = typer.Option(False, "--once", help="print one frame and exit"),
) -> None:
    """A live view of the pipeline: per bucket backlog, queued work, rate, batch size,
    padding, p50/p99; each worker's state and memory. Read from the processes' /metrics
    (the targets a local pipeline lists in the state directory, or --target)."""
    from headrace.ops.top import read_targets, run_top

    settings = Settings()
    targets = [t.rstrip("/") for t in target] or read_targets(settings.state_dir)
    if not targets:
        errors.print(
            "[red]error:[/red] no metrics targets: pass --target URL, or run a local pipeline "
            "that serves them (`headrace demo --metrics`)",
            highlight=False,
        )
        raise typer.Exit(2)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C ends the live view
        run_top(targets, settings.buckets, interval_s, console, once=once)
