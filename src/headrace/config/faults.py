"""Settings of what the pipeline does when things go wrong: attempts, heartbeats and watches,
backlogs and the degradation ladder, resends and delivery limits; and the fault injection
that tests and drills use (a part of ``Settings``, ``settings.py``)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

from headrace.schemas.results import Result

DegradeRung = Literal["fallback_version", "cache", "canned", "reject"]


class FaultSettings(BaseModel):
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

    def backlog_bound(self, bucket: int) -> int | None:
        """The most records a bucket's online backlog may hold; None: unbounded."""
        bound = self.bucket_max_backlog.get(bucket, self.max_backlog)
        return bound or None
