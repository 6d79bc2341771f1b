"""``headrace buckets propose``: bucket bounds learned from the lengths the dispatchers saw
(``headrace.workers.bucket_bounds``), against the ones configured; an operator applies them."""

from __future__ import annotations

from collections import Counter

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.health.reach import require

buckets = typer.Typer(help="Length buckets: bounds learned from traffic.")
console = Console()


@buckets.command("propose")
def buckets_propose(
    count: int = typer.Option(None, min=1, help="how many buckets (default: as many as now)"),
    hours: int = typer.Option(24, min=1, help="the traffic of the last HOURS"),
) -> None:
    """Propose bounds that pad less for the lengths seen lately (padding to the bound)."""
    import json

    from headrace import connections
    from headrace.workers.bucket_bounds import efficiency, propose
    from headrace.workers.lengths import LengthHistogram

    settings = Settings()
    require(settings, "redis")
    seen = LengthHistogram(connections.redis_client(settings), settings.topic_prefix).recent(
        settings.buckets, hours
    )
    histogram: Counter[int] = Counter()
    for part in seen.values():
        histogram.update(part)
    requests = sum(histogram.values())
    if not requests:
        console.print(f"no lengths recorded for prefix {settings.topic_prefix!r} in {hours} h")
        raise typer.Exit(1)
    current = list(settings.buckets)
    proposed = propose(histogram, count or len(current), current[-1])
    table = Table(title=f"{requests:,} requests of the last {hours} h")
    table.add_column("")
    table.add_column("bounds")
    table.add_column("efficiency", justify="right")
    table.add_row("now", ", ".join(map(str, current)), f"{efficiency(histogram, current):.3f}")
    table.add_row(
        "proposed", ", ".join(map(str, proposed)), f"{efficiency(histogram, proposed):.3f}"
    )
    console.print(table)
    console.print(
        "efficiency: real / padded tokens if each request were padded to its bucket's bound "
        "(a batch pads to its longest row: real batches do at least this well)"
    )
    console.print(
        f"to apply: HEADRACE_BUCKETS='{json.dumps(proposed)}' everywhere, `headrace init` "
        "(the new topics), then restart the dispatchers and workers once the backlog is "
        "drained (`headrace top`: nothing unread): a bucket's topic that no longer exists in "
        "the settings is not read"
    )
