"""The dispatcher's Prometheus series, fed by the core's hooks (``Observer``)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram

from headrace.workers.dispatcher.observer import Observer

RECORDS = Counter(
    "headrace_dispatcher_records_total", "Request records read, by outcome", ["outcome"]
)
BATCHES = Counter("headrace_dispatcher_batches_total", "Batches dispatched", ["bucket"])
HANDED_OFF = Counter(
    "headrace_dispatcher_handed_off_total",
    "Batches handed straight to an idle worker, past Celery's queue",
    ["bucket"],
)
REAL_TOKENS = Counter("headrace_dispatcher_real_tokens_total", "Real tokens dispatched", ["bucket"])
PADDED_TOKENS = Counter(
    "headrace_dispatcher_padded_tokens_total",
    "Padded tokens (rows x longest) dispatched",
    ["bucket"],
)
PADDING_EFFICIENCY = Gauge(
    "headrace_dispatcher_padding_efficiency", "Real / padded tokens since start", ["bucket"]
)
IN_FLIGHT = Gauge("headrace_dispatcher_inflight_batches", "Batches not yet completed", ["bucket"])
LAG = Gauge(
    "headrace_dispatcher_lag_records",
    "Records on a bucket's topic of a lane not yet read (unread) or not yet committed "
    "(uncommitted)",
    ["bucket", "lane", "kind"],
)
BATCH_ROWS = Histogram(
    "headrace_dispatcher_batch_rows",
    "Requests per batch dispatched",
    ["bucket"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
QUEUED_WORK = Gauge(
    "headrace_dispatcher_queued_work_seconds",
    "The autoscaling signal: a bucket's unanswered records times what one of its requests "
    "recently cost a worker (seconds of work for one worker), per lane",
    ["bucket", "lane"],
)
REDISPATCHED = Counter(
    "headrace_dispatcher_redispatched_batches_total",
    "Batches sent again (lease ran out, worker died)",
)


class PrometheusObserver(Observer):
    def __init__(self) -> None:
        self._tokens: dict[int, tuple[int, int]] = {}  # bucket -> (real, padded)
        self._in_flight: dict[int, int] = {}
        # a record's counter, kept: looking a labelled child up costs more than its inc,
        # once per record (a handful of outcomes)
        self._records: dict[str, Counter] = {}

    def record(self, outcome: str, count: int = 1) -> None:
        counter = self._records.get(outcome)
        if counter is None:
            counter = self._records[outcome] = RECORDS.labels(outcome)
        counter.inc(count)

    def batch(self, bucket: int, rows: int, real_tokens: int, padded_tokens: int) -> None:
        label = str(bucket)
        BATCHES.labels(label).inc()
        BATCH_ROWS.labels(label).observe(rows)
        REAL_TOKENS.labels(label).inc(real_tokens)
        PADDED_TOKENS.labels(label).inc(padded_tokens)
        real, padded = self._tokens.get(bucket, (0, 0))
        real, padded = real + real_tokens, padded + padded_tokens
        self._tokens[bucket] = (real, padded)
        PADDING_EFFICIENCY.labels(label).set(real / padded if padded else 0.0)

    def in_flight(self, batches: Mapping[int, int]) -> None:
        for bucket, count in batches.items():
            if self._in_flight.get(bucket) != count:
                self._in_flight[bucket] = count
                IN_FLIGHT.labels(str(bucket)).set(count)

    def redispatched(self) -> None:
        REDISPATCHED.inc()
