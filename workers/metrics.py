"""A worker's Prometheus series: what it computed, how long requests took on the way, how
long loading took, and the memory it holds (CUDA allocated and reserved on a GPU, RSS on a
CPU: the seed's two-track memory watch)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from headrace.schemas.messages import BatchItem, Reply

# seconds: from a lone request's ~20 ms to a long generation
LATENCY = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

BATCHES = Counter("headrace_worker_batches_total", "Batches computed", ["bucket"])
REPLIES = Counter(
    "headrace_worker_replies_total",
    "Replies sent, by outcome (ok or the error code)",
    ["bucket", "outcome"],
)
QUEUED = Histogram(
    "headrace_request_queued_seconds",
    "Created -> read by the dispatcher",
    ["bucket"],
    buckets=LATENCY,
)
BATCH_WAIT = Histogram(
    "headrace_request_batch_wait_seconds",
    "Read by the dispatcher -> its batch started computing",
    ["bucket"],
    buckets=LATENCY,
)
TO_WORKER = Histogram(
    "headrace_request_to_worker_seconds",
    "Its batch made by the dispatcher -> started computing (the trip by Celery or the "
    "hand-off, the claim and admission): the end of batch_wait",
    ["bucket"],
    buckets=LATENCY,
)
COMPUTE = Histogram(
    "headrace_batch_compute_seconds", "A batch's model time", ["bucket"], buckets=LATENCY
)
END_TO_END = Histogram(
    "headrace_request_seconds", "Created -> its reply sent", ["bucket"], buckets=LATENCY
)
LOAD_STAGES = Counter(
    "headrace_worker_load_stages_total",
    "Load stages ended (load_weights, build, warm_up), by outcome: ok, failed, timeout",
    ["stage", "outcome"],
)
MODEL_ERRORS = Counter(
    "headrace_worker_model_errors_total", "Requests the model failed on", ["bucket"]
)
RECOVERED = Counter(
    "headrace_worker_replies_recovered_total",
    "Replies answered again: the ledger had them answered, but the broker had lost them "
    "(not where it acknowledged them)",
)
INFO = Gauge(
    "headrace_worker_info",
    "1, labelled with what this worker is: its id, model, version, device and buckets",
    ["worker_id", "model", "version", "device", "buckets"],
)
LOAD_STAGE = Gauge("headrace_worker_load_stage_seconds", "Seconds each load stage took", ["stage"])
MEMORY = Gauge("headrace_worker_memory_bytes", "Memory this worker holds", ["kind"])
MEMORY_USED = Gauge(
    "headrace_worker_memory_used_ratio",
    "Share of its device's memory in use (CUDA reserved / total on a GPU; RSS / RAM on CPU)",
)

DECODE = Gauge(
    "headrace_worker_decode",
    "A generation worker's continuous decode loop: steps run, rows preempted, the most rows "
    "decoded in one step, CUDA graphs recorded, and 1 if recording one failed (every step "
    "eager since: slower)",
    ["what"],
)


def observe(batch_bucket: int, replies: Sequence[tuple[BatchItem, Reply]], now: float) -> None:
    """After a batch's replies were sent: count them and their time on the way."""
    bucket = str(batch_bucket)
    computed: set[str] = set()
    for item, reply in replies:
        outcome = reply.error.code.value if reply.error is not None else "ok"
        REPLIES.labels(bucket, outcome).inc()
        if outcome == "model_error":
            MODEL_ERRORS.labels(bucket).inc()
        END_TO_END.labels(bucket).observe(max(0.0, now - item.request.created_at.timestamp()))
        if reply.timings is not None:
            QUEUED.labels(bucket).observe(reply.timings.queued_ms / 1000)
            BATCH_WAIT.labels(bucket).observe(reply.timings.batch_wait_ms / 1000)
            if reply.timings.to_worker_ms is not None:
                TO_WORKER.labels(bucket).observe(reply.timings.to_worker_ms / 1000)
        if reply.batch is not None and reply.batch.batch_id not in computed:  # halves of a
            computed.add(reply.batch.batch_id)  # split batch report the same id
            if reply.timings is not None:
                COMPUTE.labels(bucket).observe(reply.timings.compute_ms / 1000)
    BATCHES.labels(bucket).inc()


def describe(worker_id: str, model: str, version: str, device: str, buckets: Sequence[int]) -> None:
    INFO.labels(worker_id, model, version, device, ",".join(map(str, buckets))).set(1)


def replies_recovered(count: int) -> None:
    RECOVERED.inc(count)


def stage_ended(stage: str, outcome: str) -> None:
    LOAD_STAGES.labels(stage, outcome).inc()


def loaded(load_weights_s: float, build_s: float, warm_up_s: float) -> None:
    LOAD_STAGE.labels("weights").set(load_weights_s)
    LOAD_STAGE.labels("build").set(build_s)
    LOAD_STAGE.labels("warm_up").set(warm_up_s)


def watch_memory(device: str) -> None:
    """Memory gauges read at each scrape."""
    if device.startswith("cuda"):
        import torch

        MEMORY.labels("cuda_allocated").set_function(lambda: torch.cuda.memory_allocated())
        MEMORY.labels("cuda_reserved").set_function(lambda: torch.cuda.memory_reserved())
        total = torch.cuda.get_device_properties(0).total_memory
        MEMORY_USED.set_function(lambda: torch.cuda.memory_reserved() / total)
    MEMORY.labels("rss").set_function(_rss)
    if not device.startswith("cuda"):
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        MEMORY_USED.set_function(lambda: _rss() / ram)


def _rss() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def watch_decoder(backend: Any) -> None:
    """The decode loop's gauges, read at each scrape (a backend with no loop has none)."""
    decoder = getattr(backend, "decoder", None)
    if decoder is None:
        return
    DECODE.labels("steps").set_function(lambda: decoder.steps)
    DECODE.labels("tokens").set_function(lambda: decoder.tokens)
    DECODE.labels("preempted").set_function(lambda: decoder.preempted)
    DECODE.labels("most_rows").set_function(lambda: decoder.most_rows)
    graphs = getattr(backend, "graphs", None)
    if graphs is not None:
        DECODE.labels("graphs_captured").set_function(lambda: graphs.captured)
        DECODE.labels("graphs_failed").set_function(lambda: graphs.failed is not None)
