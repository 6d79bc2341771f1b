"""``headrace top``: a live terminal view of a pipeline, read from its processes' /metrics.

Targets are given with ``--target URL`` (repeatable), or read from
``<state_dir>/metrics-targets.json``, which a local pipeline started with metrics ports
(``headrace demo``) writes. Each refresh scrapes every target (and a worker's ``/readyz``),
and ``top_view`` turns this scrape and the one before into the rows shown.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from headrace.ops.processes import TARGETS
from headrace.ops.top_view import BucketRow, Scrape, WorkerRow, buckets_view, workers_view

TIMEOUT_S = 2.0


def read_targets(state_dir: Path) -> list[str]:
    path = state_dir / TARGETS
    if not path.exists():
        return []
    return [str(url) for url in json.loads(path.read_text())]


def scrape(url: str) -> Scrape:
    now = time.monotonic()
    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=TIMEOUT_S) as answer:
            text = answer.read().decode()
    except (OSError, urllib.error.URLError):
        return Scrape(url, now, ok=False)
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=TIMEOUT_S) as answer:
            ready = answer.status == 200
    except urllib.error.HTTPError:
        ready = False
    except (OSError, urllib.error.URLError):
        ready = None
    return Scrape.parse(url, now, text, ready)


def render(buckets: list[BucketRow], workers: list[WorkerRow], interval_s: float) -> Group:
    per_bucket = Table(title=f"headrace top: per bucket (last {interval_s:.0f} s)", expand=False)
    for column in (
        "bucket",
        "unread",
        "unanswered",
        "queued s",
        "req/s",
        "rows/batch",
        "padding",
        "p50 ms",
        "p99 ms",
    ):
        per_bucket.add_column(column, justify="right")
    for row in buckets:
        per_bucket.add_row(
            str(row.bucket),
            f"{row.unread:,.0f}",
            f"{row.unanswered:,.0f}",
            f"{row.queued_work_s:,.2f}",
            f"{row.rate_per_s:,.1f}",
            _maybe(row.rows_per_batch, "{:.1f}"),
            _maybe(row.padding, "{:.2f}"),
            _maybe(row.p50_s and row.p50_s * 1000, "{:,.0f}"),
            _maybe(row.p99_s and row.p99_s * 1000, "{:,.0f}"),
        )
    per_worker = Table(title="workers", expand=False)
    for column in ("worker", "state", "model", "buckets", "memory", "share", "batches/s"):
        per_worker.add_column(column, justify="left" if column in ("worker", "model") else "right")
    for w in workers:
        per_worker.add_row(
            w.worker_id or w.url,
            {"ready": "[green]ready", "loading": "[yellow]loading"}.get(w.state, "[red]down"),
            w.model,
            w.buckets,
            _maybe(w.memory_bytes and w.memory_bytes / 2**20, "{:,.0f} MiB"),
            _maybe(w.memory_share, "{:.0%}"),
            f"{w.batches_per_s:,.1f}",
        )
    return Group(per_bucket, per_worker)


def _maybe(value: float | None, form: str) -> str:
    return "-" if value is None else form.format(value)


def frame(
    targets: Sequence[str], buckets: Sequence[int], previous: dict[str, Scrape], interval_s: float
) -> Group:
    current = [scrape(url) for url in targets]
    view = render(
        buckets_view(current, previous, buckets), workers_view(current, previous), interval_s
    )
    previous.clear()
    previous.update({s.url: s for s in current if s.ok})
    return view


def run_top(
    targets: Sequence[str],
    buckets: Sequence[int],
    interval_s: float,
    console: Console,
    once: bool = False,
) -> None:
    """Refresh every ``interval_s`` until interrupted; ``once``: print one frame (two
    scrapes, ``interval_s`` apart) and return."""
    previous: dict[str, Scrape] = {}
    frame(targets, buckets, previous, interval_s)
    if once:
        time.sleep(interval_s)
        console.print(frame(targets, buckets, previous, interval_s))
        return
    with Live(console=console, auto_refresh=False) as live:
        while True:
            time.sleep(interval_s)
            live.update(frame(targets, buckets, previous, interval_s), refresh=True)
