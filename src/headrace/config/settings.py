"""One typed settings object for every headrace process.

Values come, highest priority first, from keyword arguments, environment variables
(``HEADRACE_*``; nested fields use ``__``), a TOML file named by ``HEADRACE_CONFIG``,
and the defaults below, which point at the embedded local stack (``headrace dev up``).
Secrets are never defaults: they come from the environment or the TOML file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, get_args
from urllib.parse import urlparse

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from headrace.config.cache_policy import DEFAULT_CLASSES, ExpiryPolicy
from headrace.config.tag_rules import TagRule
from headrace.schemas.buckets import DEFAULT_BUCKETS, validate_boundaries
from headrace.schemas.results import Result

DegradeRung = Literal["fallback_version", "cache", "canned", "reject"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="HEADRACE_", env_nested_delimiter="__", extra="forbid"
    )

    # --- connections -----------------------------------------------------------------
    kafka_bootstrap: str = "127.0.0.1:19092"
    kafka_security_protocol: str = "PLAINTEXT"
    kafka_sasl_mechanism: str | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    # TLS: set kafka_security_protocol to SSL or SASL_SSL and point these at PEM files.
    kafka_ssl_cafile: Path | None = None
    kafka_ssl_certfile: Path | None = None
    kafka_ssl_keyfile: Path | None = None
    kafka_ssl_password: SecretStr | None = None
    # Reach the brokers through a proxy: socks5://host:port or http://host:port (HTTP
    # CONNECT); every broker address the cluster advertises is asked of the proxy.
    kafka_proxy_url: str | None = None
    # Which client talks to the broker (headrace.transport), and which broker it is:
    # "tansu" (the local stack) turns on the workarounds only tansu needs (fetch waits that
    # follow demand, the stalled-fetch watch, group rejoin, reading a partition back after an
    # acknowledgement without an offset, client resends, contiguous-offset checks); "kafka"
    # (Apache Kafka, production) turns them off.
    transport: Literal["kafka-python"] = "kafka-python"
    broker_flavor: Literal["tansu", "kafka"] = "tansu"
    # tansu answers a parked fetch only when its wait runs out (see README): consumers wait
    # eagerly while a lone record's latency counts, longer while idle, longest while the model
    # computes. With broker_flavor "kafka" fetches wait kafka_fetch_wait_kafka_ms (the broker
    # answers as soon as a record lands).
    kafka_fetch_wait_kafka_ms: int = Field(default=500, ge=0)
    kafka_fetch_wait_eager_ms: int = Field(default=2, ge=0)
    kafka_fetch_wait_idle_ms: int = Field(default=20, ge=0)
    kafka_fetch_wait_busy_ms: int = Field(default=100, ge=0)
    # and after this long with nothing awaited, dormant: an idle pipeline costs little CPU
    kafka_fetch_wait_dormant_ms: int = Field(default=100, ge=0)
    kafka_fetch_dormant_after_s: float = Field(default=10.0, ge=0)
    # TLS: use a rediss:// URL. The password is kept out of the URL so it never lands in logs.
    redis_url: str = "redis://127.0.0.1:16379/0"
    redis_password: SecretStr | None = None
    s3_endpoint_url: str = "http://127.0.0.1:18333"
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    s3_region: str = "us-east-1"
    sql_url: str = "sqlite:///.headrace/headrace.db"

    # --- naming ----------------------------------------------------------------------
    topic_prefix: str = "headrace"
    request_partitions: int = Field(default=1, ge=1)
    state_dir: Path = Path(".headrace")
    # uploaded files, job inputs and job spools (outputs): where every gateway replica and
    # runner pool must reach them (a ReadWriteMany volume in infra/k8s). None: state_dir
    shared_state_dir: Path | None = None
    # /metrics, /healthz and /readyz of a dispatcher, worker or invalidator on this port
    # (None: not served; each command also takes --metrics-port). The gateway serves them on
    # its own HTTP port.
    metrics_port: int | None = Field(default=None, ge=0, le=65535)
    # "otlp": long-running processes export their spans with OpenTelemetry's OTLP/HTTP
    # exporter (extra [tracing]; OTEL_EXPORTER_OTLP_* say where). "none": the API's no-op,
    # and trace context still travels on every record.
    tracing_exporter: Literal["none", "otlp"] = "none"
    # The gateway's largest upload (POST /v1/files): OpenAI's limit for a batch input file.
    max_file_bytes: int = Field(default=200 * 1024 * 1024, ge=1)
    # What one tenant may hold at the gateway (0: no cap): files and their bytes (uploads
    # and job outputs, expired ones not counted), and jobs not yet ended. Past a cap a new
    # upload or job is answered 429 naming the cap; deleting files, or jobs ending, frees it.
    tenant_max_files: int = Field(default=10_000, ge=0)
    tenant_max_file_bytes: int = Field(default=100 * 1024**3, ge=0)
    tenant_max_open_jobs: int = Field(default=1_000, ge=0)
    # The largest body of any other gateway route (JSON): refused 413 before it is read.
    # 2,048 embedding inputs of ~4 KB each fit; a bigger body is no OpenAI request.
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    # Webhooks go only to public addresses, or to hosts / networks listed here (e.g.
    # ["hooks.internal", "10.1.0.0/16"]); each is signed with its tenant's secret, the file
    # <webhook_secrets_dir>/<tenant> (a mounted secret). No secret: no webhooks.
    webhook_allowed_hosts: list[str] = Field(default_factory=list)
    webhook_secrets_dir: Path | None = None
    # Tenants' signing keys, a file named after each (mounted secrets): a tenant with one
    # signs what it produces (the SDK does), and dispatchers take only its signed records
    # (schemas/signing.py). No file: the tenant's records are not signed.
    tenant_keys_dir: Path | None = None
    # Local stack broker storage. "s3" survives broker restarts, but this tansu build stops
    # serving a partition past 1,000 stored batches (measured; see README), so "memory" is
    # the default.
    broker_storage: Literal["memory", "s3"] = "memory"

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
    max_inflight_batches_per_bucket: int = Field(default=8, ge=1)
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

    # --- faults and limits ----------------------------------------------------------------
    # A request whose batch crashed or ran past its lease this many times while it was alone in
    # the batch is dead-lettered (a crashed batch is split in halves before it is sent again,
    # so a request that kills its worker ends up alone and its batch-mates are answered).
    max_attempts: int = Field(default=3, ge=1)
    # Workers beat this often; one silent for three beats is dead and its batch is sent again
    # at once (not at the end of its lease).
    worker_heartbeat_s: float = Field(default=2.0, gt=0)
    # A worker whose model is at work and has not finished a forward pass for this long has
    # stopped moving (a hung kernel, a deadlocked decode loop): it logs every thread's stack
    # and exits (code 87), so its batch is sent to another worker at once instead of waiting
    # out leases (workers/stall_watch.py). A step of a serving model takes milliseconds to a
    # few seconds; None: no watch.
    worker_stall_s: float | None = Field(default=20.0, gt=0)
    # A dispatcher whose loop has been in one pass this long exits so that a fresh one takes
    # its partitions (workers/dispatcher/io/loop_watch.py; a pass takes milliseconds). None: never.
    dispatcher_stall_exit_s: float | None = Field(default=120.0, gt=0)
    # JSON size of one request, enforced by the producer and again by the dispatcher (below
    # Kafka's default 1 MiB message limit, so an oversized record still reaches the dispatcher
    # and gets its typed error)
    max_request_bytes: int = Field(default=256 * 1024, ge=1024)
    # Degradation: a bucket with no live worker for degrade_after_s, or whose model-error rate
    # passes breaker_error_rate (over at least breaker_min_requests in breaker_window_s), answers
    # new requests at once with `unavailable` ("error") or keeps queueing them ("queue"), and
    # tries again after breaker_cooldown_s.
    degrade_after_s: float = Field(default=5.0, gt=0)
    # A bucket that has never had a live worker is starting, not broken: its requests queue
    # (within their deadlines) for up to cold_start_s while workers load their model.
    cold_start_s: float = Field(default=300.0, gt=0)
    degraded_fallback: Literal["error", "queue"] = "error"
    # The degradation ladder ("error" above; workers/dispatcher/ladder.py): a request its
    # bucket cannot serve (no live worker, breaker open, or, with a deadline, queued work
    # needing more than degrade_late_factor times what the deadline leaves; 0: never) takes
    # the first rung of degrade_rungs that can serve it: the model's previous stable version,
    # a cached result (even stale), the model's canned answer (degrade_canned: model -> an
    # EmbeddingResult or GenerationResult as JSON), the reject. Reply.degraded says which.
    # Tenants in degrade_opt_out get the reject at once.
    degrade_rungs: list[DegradeRung] = Field(default_factory=lambda: list(get_args(DegradeRung)))
    degrade_canned: dict[str, Result] = Field(default_factory=dict)
    degrade_opt_out: list[str] = Field(default_factory=list)
    degrade_late_factor: float = Field(default=1.0, ge=0)
    breaker_error_rate: float = Field(default=0.5, gt=0, le=1)
    breaker_min_requests: int = Field(default=20, ge=1)
    breaker_window_s: float = Field(default=30.0, gt=0)
    breaker_cooldown_s: float = Field(default=10.0, gt=0)
    # Bounded queues: an online request to a bucket whose backlog (records not yet answered)
    # is past max_backlog (bucket_max_backlog per bucket) is refused with `overloaded` (429
    # at the gateway, with Retry-After): by the SDK and the gateway before it is produced,
    # from the backlog the dispatchers publish each second; by the dispatcher as it reads
    # the records that got past (oldest first) until the backlog is under the bound. 0: none.
    max_backlog: int = Field(default=20_000, ge=0)
    bucket_max_backlog: dict[int, int] = Field(default_factory=dict)
    # Per-tenant limits (0: none); `headrace limits set TENANT ...` overrides them per tenant
    # (kept in Redis). Counted by the dispatchers in Redis, which refuse what passes them
    # (`rate_limited`, `quota_exceeded`); the SDK and the gateway refuse what is already over
    # before producing it. The request rate counts online requests over a sliding second;
    # the token quota counts the tokens of every lane per quota_window_s.
    tenant_requests_per_s: float = Field(default=0.0, ge=0)
    tenant_tokens_per_window: int = Field(default=0, ge=0)
    quota_window_s: float = Field(default=3600.0, gt=0)
    # The client's bound on unanswered requests: past it, submit blocks up to
    # client_block_timeout_s ("block") or raises BackpressureError at once ("raise").
    client_max_pending: int = Field(default=10_000, ge=1)
    client_on_full: Literal["block", "raise"] = "block"
    client_block_timeout_s: float = Field(default=30.0, ge=0)
    # A request unanswered this long is produced again (same request_id: the pipeline answers
    # it once), up to client_max_resends times: a broker that lost an acknowledged request
    # record (seen with tansu) costs a delay, not the request. None turns it off.
    # only against a broker that may lose acknowledged records (transport guarantees: tansu)
    client_resend_after_s: float | None = Field(default=60.0, gt=0)
    client_max_resends: int = Field(default=3, ge=0)
    # How long a worker waits for its replies to be acknowledged by the broker (it keeps its
    # claims meanwhile, so a broker restart delays replies instead of duplicating them).
    reply_delivery_timeout_s: float = Field(default=120.0, gt=0)

    # --- result cache ------------------------------------------------------------------------
    # Clients read the cache (L1 here, L2 Redis, L3 S3) before sending a request, and their
    # requests ask workers to write results through. Off by default: a hit never reaches the
    # request topics, which a user counting replies there should choose knowingly.
    cache_enabled: bool = False
    cache_l1_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)  # per process; 0: no L1
    cache_s3_bucket: str = "headrace-cache"  # L3; "" turns L3 off
    cache_timeout_s: float = Field(default=0.5, gt=0)  # a tier slower than this is skipped
    # A request identical to one being computed (same cache key and generations, lane and
    # priority) waits on that computation and is answered with its result (docs/cache.md).
    cache_coalesce: bool = True
    # The semantic cache: a generation may be answered with the cached answer to a near
    # prompt of the same scope (docs/cache.md). Opt-in twice: its tenant here ("*": every
    # tenant) and the request (semantic=True). Prompts are embedded in the client's process
    # by cache_semantic_model; served at cosine >= cache_semantic_threshold, guards passed.
    cache_semantic_tenants: list[str] = Field(default_factory=list)
    cache_semantic_threshold: float = Field(default=0.92, gt=0, le=1)
    cache_semantic_model: str = "all-MiniLM-L6-v2"
    # Expiry per entry class (a request names its class; "default" otherwise).
    cache_classes: dict[str, ExpiryPolicy] = Field(default_factory=lambda: dict(DEFAULT_CLASSES))
    # Events on upstream topics that invalidate tags (read by `headrace invalidator`).
    cache_tag_rules: list[TagRule] = Field(default_factory=list)

    # --- fault injection (tests and drills only; never set in production) --------------------
    # An input containing fault_poison_marker makes the model raise; one containing
    # fault_crash_marker kills the worker process (os._exit) mid-batch; a batch holding one
    # containing fault_slow_marker takes fault_slow_s longer; one holding fault_stall_marker
    # never ends (its model at work and not moving: the stall watch ends the worker).
    fault_poison_marker: str | None = None
    fault_crash_marker: str | None = None
    fault_slow_marker: str | None = None
    fault_slow_s: float = Field(default=3.0, ge=0)
    fault_stall_marker: str | None = None
    # a dispatcher that reads a request containing fault_dispatcher_stall_marker stops in
    # that pass for good (its loop watch ends it)
    fault_dispatcher_stall_marker: str | None = None
    # a worker's loading stage of this name never ends (its limit ends the worker)
    fault_hang_stage: Literal["load_weights", "build", "warm_up"] | None = None

    @field_validator("buckets")
    @classmethod
    def _check_buckets(cls, value: list[int]) -> list[int]:
        return validate_boundaries(value)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_path = os.environ.get("HEADRACE_CONFIG")
        if config_path:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=Path(config_path)))
        sources.append(file_secret_settings)
        return tuple(sources)

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        return cls(**overrides)

    # --- derived ---------------------------------------------------------------------
    def backlog_bound(self, bucket: int) -> int | None:
        """The most records a bucket's online backlog may hold; None: unbounded."""
        bound = self.bucket_max_backlog.get(bucket, self.max_backlog)
        return bound or None

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

    def kafka_options(self) -> dict[str, Any]:
        """Connection options shared by every kafka-python client."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.kafka_bootstrap.split(","),
            "security_protocol": self.kafka_security_protocol,
            # the default backoff grows to 30 s; a restarted broker should be found in ~1 s
            "reconnect_backoff_max_ms": 1000,
        }
        if self.kafka_sasl_mechanism:
            options["sasl_mechanism"] = self.kafka_sasl_mechanism
            options["sasl_plain_username"] = self.kafka_sasl_username
            if self.kafka_sasl_password is not None:
                options["sasl_plain_password"] = self.kafka_sasl_password.get_secret_value()
        for name in ("cafile", "certfile", "keyfile"):
            path = getattr(self, f"kafka_ssl_{name}")
            if path is not None:
                options[f"ssl_{name}"] = str(path)
        if self.kafka_ssl_password is not None:
            options["ssl_password"] = self.kafka_ssl_password.get_secret_value()
        if self.kafka_proxy_url:
            options["proxy_url"] = self.kafka_proxy_url
        return options

    @property
    def shared_dir(self) -> Path:
        """Where files and job spools live: ``shared_state_dir``, else ``state_dir``."""
        return self.shared_state_dir or self.state_dir

    def redis_password_value(self) -> str | None:
        return self.redis_password.get_secret_value() if self.redis_password else None

    def port_of(self, url: str) -> int:
        parsed = urlparse(url if "://" in url else f"tcp://{url}")
        if parsed.port is None:
            raise ValueError(f"no port in {url!r}")
        return parsed.port


def default(name: str) -> Any:
    """The default of setting ``name``: the one source for a policy object that repeats a
    setting's default (the dispatcher's ``CoreConfig``, its health, lane and ladder policies),
    without reading the environment."""
    return Settings.model_fields[name].get_default(call_default_factory=True)
