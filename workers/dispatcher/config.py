"""What the dispatcher's core is told at start: the settings it uses, and the models the
pipeline serves."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from headrace.config.settings import Settings, default
from headrace.limits.policy import TenantLimits
from headrace.schemas.signing import Keys, tenant_keys
from headrace.schemas.topics import Lane, Topics
from headrace.transport.guarantees import guarantees_of
from headrace.workers.dispatcher.batcher import Batcher, DynamicBatcher
from headrace.workers.dispatcher.flights import Pending
from headrace.workers.dispatcher.health import HealthPolicy
from headrace.workers.dispatcher.ladder import LadderPolicy
from headrace.workers.dispatcher.lanes import LanePolicy
from headrace.workers.dispatcher.packer import PackingBatcher
from headrace.workers.dispatcher.quotas import LimitsPolicy


@dataclass(frozen=True)
class CoreConfig:
    """What the core needs of the settings, and the models it serves (name -> max tokens:
    looked up by the shell, since finding a model can touch the disk). Defaults are the
    settings' own (``default``); ``pack`` alone differs: bare, the core batches in arrival
    order, the rule its delivery tests drive."""

    dispatcher_id: str
    topics: Topics
    buckets: tuple[int, ...]
    served: Mapping[str, int]
    # tenants that sign their records, and their keys (schemas/signing.py)
    tenant_keys: Keys = field(default_factory=dict)
    # how long the ledger remembers an answered id: a signed request older is a replay
    answered_ttl_s: float = default("answered_ttl_s")
    max_batch_tokens: int = default("max_batch_tokens")
    bulk_max_batch_tokens: int = default("bulk_max_batch_tokens")
    max_wait_ms: float = default("max_wait_ms")
    max_inflight_batches_per_bucket: int | None = default("max_inflight_batches_per_bucket")
    lease_base_s: float = default("lease_base_s")
    lease_s_per_1k_tokens: float = default("lease_s_per_1k_tokens")
    commit_interval_ms: float = default("commit_interval_ms")
    max_attempts: int = default("max_attempts")
    max_request_bytes: int = default("max_request_bytes")
    degraded_fallback: Literal["error", "queue"] = default("degraded_fallback")
    health: HealthPolicy = field(default_factory=HealthPolicy)
    ladder: LadderPolicy = field(default_factory=LadderPolicy)
    # request topics are neither compacted nor transactional: a fetch that starts past the
    # next expected offset skipped records (seen with tansu); read them again
    contiguous_offsets: bool = True
    scaling_prior_tokens_per_s: float = default("scaling_prior_tokens_per_s")
    # a bucket's waiting requests are packed into batches of similar length (False: the
    # arrival-order rule, which the delivery unit tests use)
    pack: bool = False
    batch_overhead_tokens: int = default("batch_overhead_tokens")
    pack_window: int = default("pack_window")
    lanes: LanePolicy = field(default_factory=LanePolicy)
    limits: LimitsPolicy = field(default_factory=LimitsPolicy)
    # fair share (fair.py): tokens a tenant of weight 1 is given a turn, and the tokens read
    # ahead of the workers (per bucket and lane) before a lane's topic is paused
    fair_share: bool = default("fair_share")  # False: arrival order (one queue, one band)
    fair_quantum_tokens: int | None = default(
        "fair_quantum_tokens"
    )  # None: a 16th of the lane's batch budget
    fair_read_ahead_tokens: int = default("fair_read_ahead_tokens")
    coalesce: bool = default("cache_coalesce")  # identical requests share one computation

    def batcher(self, lane: Lane, clock: Callable[[], float]) -> Batcher[Pending]:
        """A bucket's batcher for ``lane``: the packer, or the arrival-order rule."""
        if self.pack:
            return PackingBatcher(
                self.batch_tokens(lane),
                self.max_wait_ms,
                clock,
                overhead_tokens=self.batch_overhead_tokens,
                window=self.pack_window,
            )
        return DynamicBatcher(self.batch_tokens(lane), self.max_wait_ms, clock)

    def batch_tokens(self, lane: Lane) -> int:
        """A lane's padded-token budget: bulk batches are smaller, so a worker busy with one
        is back for online work sooner (a batch cannot be interrupted)."""
        return self.max_batch_tokens if lane == "online" else self.bulk_max_batch_tokens

    @classmethod
    def from_settings(
        cls, settings: Settings, served: Mapping[str, int], dispatcher_id: str | None = None
    ) -> CoreConfig:
        return cls(
            dispatcher_id=dispatcher_id or uuid.uuid4().hex[:12],
            topics=Topics(settings.topic_prefix),
            buckets=tuple(settings.buckets),
            served=dict(served),
            tenant_keys=tenant_keys(settings.tenant_keys_dir),
            answered_ttl_s=settings.answered_ttl_s,
            max_batch_tokens=settings.max_batch_tokens,
            bulk_max_batch_tokens=settings.bulk_max_batch_tokens,
            max_wait_ms=settings.max_wait_ms,
            max_inflight_batches_per_bucket=settings.max_inflight_batches_per_bucket,
            lease_base_s=settings.lease_base_s,
            lease_s_per_1k_tokens=settings.lease_s_per_1k_tokens,
            commit_interval_ms=settings.commit_interval_ms,
            max_attempts=settings.max_attempts,
            max_request_bytes=settings.max_request_bytes,
            degraded_fallback=settings.degraded_fallback,
            health=HealthPolicy(
                degrade_after_s=settings.degrade_after_s,
                cold_start_s=settings.cold_start_s,
                error_rate=settings.breaker_error_rate,
                min_requests=settings.breaker_min_requests,
                window_s=settings.breaker_window_s,
                cooldown_s=settings.breaker_cooldown_s,
            ),
            ladder=LadderPolicy(
                rungs=tuple(settings.degrade_rungs),
                canned=dict(settings.degrade_canned),
                opt_out=frozenset(settings.degrade_opt_out),
                late_factor=settings.degrade_late_factor,
            ),
            contiguous_offsets=guarantees_of(settings).contiguous_offsets,
            scaling_prior_tokens_per_s=settings.scaling_prior_tokens_per_s,
            pack=settings.pack_batches,
            batch_overhead_tokens=settings.batch_overhead_tokens,
            pack_window=settings.pack_window,
            fair_share=settings.fair_share,
            fair_quantum_tokens=settings.fair_quantum_tokens,
            fair_read_ahead_tokens=settings.fair_read_ahead_tokens,
            coalesce=settings.cache_coalesce,
            lanes=LanePolicy(
                reserved_workers=settings.bulk_reserved_workers,
                starvation_s=settings.bulk_starvation_s,
                harvest_after_s=settings.bulk_harvest_after_s,
            ),
            limits=LimitsPolicy(
                defaults=TenantLimits(
                    settings.tenant_requests_per_s, settings.tenant_tokens_per_window
                ),  # weight 1: equal shares unless a tenant's own limits say otherwise
                window_s=settings.quota_window_s,
                bounds={
                    b: bound
                    for b in settings.buckets
                    if (bound := settings.backlog_bound(b)) is not None
                },
            ),
        )
