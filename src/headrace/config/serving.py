"""Settings of what a pipeline serves and how it batches: the model and its backend, the
worker's loading, the buckets and the batch budgets (a part of ``Settings``,
``settings.py``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from headrace.schemas.buckets import DEFAULT_BUCKETS, validate_boundaries


class ServingSettings(BaseModel):
    # --- model -----------------------------------------------------------------------
    # The model a pipeline serves: a name registered with `headrace models add` (its
    # versions and traffic policy live in the SQL store), or a built-in one.
    model: str = "all-MiniLM-L6-v2"
    # The version a worker serves (None: the model's stable version when the worker starts).
    model_version: str | None = None
    # "echo": a labelled stand-in that runs no model, for benchmarks of the pipeline path
    worker_backend: Literal["model", "echo"] = "model"
    # generation models: "transformers" (CPU or CUDA, batched in the worker) or "vllm"
    # (vLLM's async engine in the worker process; extra [vllm], GPU)
    generation_backend: Literal["transformers", "vllm"] = "transformers"
    # Continuous batching: a generation worker holds this many batches at once, and their rows
    # share one decode loop that rows join and leave at every step (vLLM's engine, or
    # workers/backends/continuous.py); 1 decodes one batch at a time, to its end (static).
    generation_slots: int = Field(default=64, ge=1)
    # batches an encoder (embedding) worker holds at once: their forward passes take turns,
    # so one batch's claims and reply delivery (Redis and Kafka round trips, ~5 ms) overlap
    # another's compute (a GPU is idle during those round trips otherwise; on two CPU cores
    # a worker's own gaps between batches were 9 ms p50 each, and 2 slots took the idle
    # cores of `./dev bench` from 0.11-0.12 to 0.07: docs/benchmarks.md)
    encoder_slots: int = Field(default=2, ge=1)
    # An online batch goes straight to an idle worker of its queue when there is one (a Redis
    # list the worker waits on, workers/handoff.py), not through Celery's queue: a lone
    # request's latency without Celery's round trip. Busy workers: Celery, as always.
    handoff: bool = True
    generation_max_rows: int = Field(default=256, ge=1)  # rows decoding at once (transformers)
    # On a GPU the continuous decoder keeps its rows on fixed slots and replays each decode
    # step as a CUDA graph (workers/backends/decode_graphs.py); false: one kernel launch at a
    # time over the left-padded cache (the CPU's way)
    generation_cuda_graphs: bool = True
    vllm_gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    vllm_max_num_seqs: int = Field(default=256, ge=1)
    vllm_max_num_batched_tokens: int | None = Field(default=None, ge=1)
    vllm_enable_prefix_caching: bool = True
    # vLLM's priority scheduler (scheduling_policy="priority", a vLLM that has it): a row's
    # class (interactive first) is its priority, and vLLM may preempt worse-ranked rows
    vllm_priority_scheduling: bool = False
    sessions_s3_bucket: str = "headrace-sessions"  # idle conversation histories, zstd
    session_ttl_s: float = Field(default=7 * 24 * 3600, gt=0)  # in Redis since last write
    # the invalidator moves sessions idle for session_idle_s to S3, every
    # session_archive_every_s; each process keeps at most session_l1_max_bytes of them
    session_idle_s: float = Field(default=3600.0, gt=0)
    session_archive_every_s: float = Field(default=60.0, gt=0)
    session_l1_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    torch_threads: int | None = None
    device: str = "auto"  # "auto" picks cuda when present, else cpu
    # The memory a worker plans within (None: the CUDA device's, or what this machine has
    # available). A worker takes no bucket whose batch of one row does not fit, and tells the
    # dispatchers how many rows each of its buckets' batches may hold.
    device_memory_bytes: int | None = Field(default=None, ge=1)
    # Each loading stage's limit: past it the worker ends (exit 81 / 82 / 83) and its
    # supervisor starts it again with backoff.
    load_weights_timeout_s: float = Field(default=300.0, gt=0)
    build_timeout_s: float = Field(default=300.0, gt=0)
    warm_up_timeout_s: float = Field(default=300.0, gt=0)
    # rows of each warm-up batch (its lengths come from the bucket's recent traffic)
    warm_up_rows: int = Field(default=4, ge=1)

    # --- batching (units in the names) ---------------------------------------------------
    buckets: list[int] = Field(default_factory=lambda: list(DEFAULT_BUCKETS))
    max_batch_tokens: int = Field(default=4096, ge=1)  # padded tokens: rows x longest row
    max_wait_ms: float = Field(default=20.0, ge=0)
    # Packing: a bucket's waiting requests are sorted by length and cut into batches where
    # the padded tokens saved pass batch_overhead_tokens per extra batch (what a batch costs
    # beyond its tokens), once pack_window batches' worth wait, max_wait_ms has passed, or
    # the bucket's workers are idle. False: batches in arrival order, sent when full.
    pack_batches: bool = True
    batch_overhead_tokens: int = Field(default=32, ge=0)
    pack_window: int = Field(default=2, ge=1)
    # Batches a bucket may have out at once: None, what its live workers take at once plus
    # one waiting for each (8 before any worker is seen); a number caps that
    max_inflight_batches_per_bucket: int | None = Field(default=None, ge=1)
    # Fair share: inside each bucket and lane, requests wait in one queue per tenant and
    # batches are filled round the tenants, fair_quantum_tokens x the tenant's weight a turn
    # (none: a 16th of the lane's batch budget, so a turn is a small part of a batch)
    # (`headrace limits set T --weight W`; 1 by default), interactive before default before
    # sheddable. Up to fair_read_ahead_tokens tokens per bucket and lane are read ahead of the
    # workers (what fairness can choose from); then the lane's topic is paused.
    # False: one queue per bucket and lane, in arrival order (what bench-fairness compares)
    fair_share: bool = True
    fair_quantum_tokens: int | None = Field(default=None, ge=1)
    fair_read_ahead_tokens: int = Field(default=65_536, ge=1)
    # Bulk jobs ride their own lane (topics <prefix>.requests.b<N>.bulk): online batches go
    # first; bulk holds at most the bucket's live workers less bulk_reserved_workers (at least
    # one) in flight, and a bulk batch whose oldest request waited bulk_starvation_s goes out
    # even while online is busy, so bulk always moves.
    bulk_reserved_workers: int = Field(default=1, ge=0)
    # bulk batches' padded-token budget: smaller than online's, so a worker busy with bulk is
    # back for online work sooner
    bulk_max_batch_tokens: int = Field(default=1024, ge=1)
    bulk_starvation_s: float = Field(default=5.0, gt=0)
    # Harvest: once no online work has waited or run on a bucket's workers this long, bulk may
    # hold every one of them (the reserved ones too) until online work comes back. None: never.
    bulk_harvest_after_s: float | None = Field(default=1.0, ge=0)
    # Workers compute bulk batches on a thread of this niceness: the operating system gives
    # online work (batches, the dispatcher, the broker) the CPU first. 0 turns it off.
    bulk_nice: int = Field(default=10, ge=0, le=19)
    lease_base_s: float = Field(default=30.0, gt=0)
    lease_s_per_1k_tokens: float = Field(default=2.0, ge=0)
    commit_interval_ms: float = Field(default=100.0, ge=0)
    answered_ttl_s: int = Field(default=7 * 24 * 3600, ge=1)
    # The autoscaling signal (headrace_dispatcher_queued_work_seconds): a bucket's backlog
    # times what its requests recently cost; before a bucket's first batch, its length at
    # the model throughput seen so far, or this one before any batch (MiniLM on 2 CPU cores
    # does about 5,000 padded tokens/s).
    scaling_prior_tokens_per_s: float = Field(default=5000.0, gt=0)
    # Bulk and single jobs: a runner holds a job's lease (renewed every second) and a job
    # whose lease ran out job_lease_s after its runner's last renewal is taken over by any
    # runner pool (the gateway's, or `headrace batch runner`), which carries job_runners
    # jobs at once and looks for new or orphaned ones every job_poll_s.
    job_lease_s: float = Field(default=30.0, ge=2)
    job_runners: int = Field(default=4, ge=0)
    job_poll_s: float = Field(default=1.0, gt=0)
    # A runner whose job's disk is full stops at once (the job stays in_progress, its errors
    # say why) and holds the job's lease this long; then any pool carries it on from its
    # last checkpoint, and stops again while there is still no room.
    job_disk_full_retry_s: float = Field(default=10.0, gt=0)
    # the gateway moves closed minutes of per-tenant usage from Redis to the SQL store this
    # often (`headrace cost report` does it before it reads, too)
    usage_flush_every_s: float = Field(default=30.0, gt=0)

    @field_validator("buckets")
    @classmethod
    def _check_buckets(cls, value: list[int]) -> list[int]:
        return validate_boundaries(value)

    def vllm_engine_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "gpu_memory_utilization": self.vllm_gpu_memory_utilization,
            "max_num_seqs": self.vllm_max_num_seqs,
            "enable_prefix_caching": self.vllm_enable_prefix_caching,
        }
        if self.vllm_max_num_batched_tokens is not None:
            args["max_num_batched_tokens"] = self.vllm_max_num_batched_tokens
        if self.vllm_priority_scheduling:
            args["scheduling_policy"] = "priority"
        return args
