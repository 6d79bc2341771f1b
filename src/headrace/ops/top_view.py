"""What ``headrace top`` shows, computed from two scrapes of the processes' ``/metrics``:
pure (text in, rows out), so its arithmetic is tested without a pipeline.

Per bucket (summed over dispatchers and workers): backlog (unread and unanswered records),
queued work (the autoscaling signal), requests per second, rows per batch, padding
efficiency and p50 / p99 end-to-end latency over the interval (from the histograms'
buckets, interpolated as Prometheus' ``histogram_quantile`` does). Per worker: its state,
model, memory and batches per second.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]


@dataclass
class Scrape:
    """One target's samples at one time (``ok`` False: it did not answer)."""

    url: str
    at: float
    samples: dict[tuple[str, Labels], float] = field(default_factory=dict)
    ready: bool | None = None
    ok: bool = True

    @classmethod
    def parse(cls, url: str, at: float, text: str, ready: bool | None) -> Scrape:
        samples = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[s.name, frozenset(s.labels.items())] = float(s.value)
        return cls(url, at, samples, ready)

    @property
    def kind(self) -> str:
        names = {name for name, _ in self.samples}
        if any(n.startswith("headrace_dispatcher_") for n in names):
            return "dispatcher"
        if "headrace_worker_info" in names or any(n.startswith("headrace_worker_") for n in names):
            return "worker"
        return "other"

    def values(self, name: str, **match: str) -> dict[Labels, float]:
        return {
            labels: v
            for (n, labels), v in self.samples.items()
            if n == name and all((k, m) in labels for k, m in match.items())
        }

    def total(self, name: str, **match: str) -> float:
        return sum(self.values(name, **match).values())


@dataclass(frozen=True)
class BucketRow:
    bucket: int
    unread: float
    unanswered: float
    queued_work_s: float
    rate_per_s: float
    rows_per_batch: float | None
    padding: float | None
    p50_s: float | None
    p99_s: float | None


@dataclass(frozen=True)
class WorkerRow:
    url: str
    state: str
    worker_id: str
    model: str
    buckets: str
    memory_bytes: float | None
    memory_share: float | None
    batches_per_s: float


def label(labels: Labels, name: str) -> str:
    return dict(labels).get(name, "")


def quantile(q: float, cumulative: Mapping[float, float]) -> float | None:
    """The ``q`` quantile of a histogram's cumulative bucket counts (upper bound -> count),
    linear within a bucket; None without observations."""
    bounds = sorted(cumulative)
    if not bounds or cumulative[bounds[-1]] <= 0:
        return None
    total = cumulative[bounds[-1]]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = cumulative[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # past the last finite bound: its lower edge, as Prometheus
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 0.0)
        lower, below = bound, count
    return lower


def _delta(cur: Iterable[Scrape], prev: Mapping[str, Scrape], name: str, **match: str) -> float:
    """Sum over targets of the counter's increase (a restarted target counts from 0)."""
    out = 0.0
    for s in cur:
        now = s.total(name, **match)
        before = prev[s.url].total(name, **match) if s.url in prev else 0.0
        out += now - before if now >= before else now
    return out


def _histogram_delta(
    cur: Iterable[Scrape], prev: Mapping[str, Scrape], name: str, bucket: str
) -> dict[float, float]:
    out: dict[float, float] = {}
    for s in cur:
        for labels, value in s.values(f"{name}_bucket", bucket=bucket).items():
            le = float(label(labels, "le"))
            before = (
                prev[s.url].samples.get((f"{name}_bucket", labels), 0.0) if s.url in prev else 0.0
            )
            out[le] = out.get(le, 0.0) + (value - before if value >= before else value)
    return out


def buckets_view(
    cur: list[Scrape], prev: Mapping[str, Scrape], buckets: Iterable[int]
) -> list[BucketRow]:
    dispatchers = [s for s in cur if s.ok and s.kind == "dispatcher"]
    workers = [s for s in cur if s.ok and s.kind == "worker"]
    elapsed = _elapsed(cur, prev)
    rows = []
    for b in buckets:
        key = str(b)
        batches = _delta(dispatchers, prev, "headrace_dispatcher_batch_rows_count", bucket=key)
        rows_sent = _delta(dispatchers, prev, "headrace_dispatcher_batch_rows_sum", bucket=key)
        real = _delta(dispatchers, prev, "headrace_dispatcher_real_tokens_total", bucket=key)
        padded = _delta(dispatchers, prev, "headrace_dispatcher_padded_tokens_total", bucket=key)
        replies = _delta(workers, prev, "headrace_worker_replies_total", bucket=key)
        latency = _histogram_delta(workers, prev, "headrace_request_seconds", key)
        rows.append(
            BucketRow(
                bucket=b,
                unread=sum(
                    s.total("headrace_dispatcher_lag_records", bucket=key, kind="unread")
                    for s in dispatchers
                ),
                unanswered=sum(
                    s.total("headrace_dispatcher_lag_records", bucket=key, kind="uncommitted")
                    for s in dispatchers
                ),
                queued_work_s=sum(
                    s.total("headrace_dispatcher_queued_work_seconds", bucket=key)
                    for s in dispatchers
                ),
                rate_per_s=replies / elapsed if elapsed > 0 else 0.0,
                rows_per_batch=rows_sent / batches if batches else None,
                padding=real / padded if padded else None,
                p50_s=quantile(0.5, latency),
                p99_s=quantile(0.99, latency),
            )
        )
    return rows


def workers_view(cur: list[Scrape], prev: Mapping[str, Scrape]) -> list[WorkerRow]:
    out = []
    elapsed = _elapsed(cur, prev)
    for s in cur:
        kind = s.kind if s.ok else (prev[s.url].kind if s.url in prev else "worker")
        if kind != "worker":
            continue
        info = next(iter(s.values("headrace_worker_info")), frozenset())
        memory = s.values("headrace_worker_memory_bytes")
        held = {label(k, "kind"): v for k, v in memory.items()}
        batches = _delta([s], prev, "headrace_worker_batches_total") if s.ok else 0.0
        state = "down" if not s.ok else ("ready" if s.ready else "loading")
        out.append(
            WorkerRow(
                url=s.url,
                state=state,
                worker_id=label(info, "worker_id"),
                model=":".join(p for p in (label(info, "model"), label(info, "version")) if p),
                buckets=label(info, "buckets"),
                memory_bytes=held.get("cuda_reserved", held.get("rss")),
                memory_share=s.total("headrace_worker_memory_used_ratio") if memory else None,
                batches_per_s=batches / elapsed if elapsed > 0 else 0.0,
            )
        )
    return out


def _elapsed(cur: Iterable[Scrape], prev: Mapping[str, Scrape]) -> float:
    gaps = [s.at - prev[s.url].at for s in cur if s.url in prev]
    return max(gaps) if gaps else 0.0
