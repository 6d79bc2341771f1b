"""A bulk runner's Prometheus series (served by ``headrace batch run --metrics-port``)."""

from __future__ import annotations

from prometheus_client import Counter

LINES = Counter(
    "headrace_bulk_lines_total",
    "Lines of bulk jobs answered, by outcome: completed, or failed (an invalid line, an error "
    "reply, expiry)",
    ["outcome"],
)


def line_answered(failed: bool) -> None:
    LINES.labels("failed" if failed else "completed").inc()


DISK_FULL_STOPS = Counter(
    "headrace_bulk_disk_full_stops_total",
    "Job runs stopped because the disk of the job's spools was full (each carried on later "
    "from its last checkpoint)",
)
