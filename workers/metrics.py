"""Prometheus metrics exported by the dispatcher and workers."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

RECORDS = Counter(
    "headrace_dispatcher_records_total", "Request records read, by outcome", ["outcome"]
)
BATCHES = Counter("headrace_dispatcher_batches_total", "Batches dispatched", ["bucket"])
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
REDISPATCHED = Counter(
    "headrace_dispatcher_redispatched_batches_total", "Batches sent again after their lease ran out"
)
