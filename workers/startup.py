"""What a worker says about itself once its model is loaded: the LOADED line's figures, its
memory plan, the warm-up figures it writes into a registered version's manifest (the first
worker per device), and the recent request lengths its warm-up is shaped by."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import redis

from headrace import connections
from headrace.config.settings import Settings
from headrace.models.catalog import ModelCatalog
from headrace.models.registry import ModelSpec
from headrace.schemas.manifest import Warmed, WarmUpShape
from headrace.workers.backends.base import ModelBackend, Shape
from headrace.workers.lengths import LengthHistogram
from headrace.workers.loading import device_name
from headrace.workers.memory_plan import plan_model

log = logging.getLogger(__name__)


def memory_plan(
    settings: Settings, spec: ModelSpec, backend: ModelBackend | None, buckets: list[int]
) -> dict[str, Any]:
    """The worker's memory plan: estimated before loading (``backend`` None), with the
    figures measured after warm-up where the backend has them (CUDA)."""
    try:
        _, plan = plan_model(
            spec.path,
            settings.device,
            buckets=buckets,
            max_batch_tokens=settings.max_batch_tokens,
            memory=backend.timings.memory if backend is not None else None,
            total_bytes=settings.device_memory_bytes,
        )
    except Exception as exc:  # a plan is advice: never a reason not to start
        return {"error": f"{type(exc).__name__}: {exc}"}
    keep = ("max_batch_tokens", "max_sequences", "kv_tokens", "bucket_rows", "measured")
    return {k: v for k, v in plan.as_dict().items() if k in keep} | {"warnings": plan.warnings}


def admit_by_plan(backend: ModelBackend, plan: dict[str, Any]) -> int | None:
    """Give a continuous decoder the plan's KV cache room (``kv_tokens``): rows join only
    while it holds them (issue 35 item 2). The room set, or None (no decoder, no figure)."""
    decoder = getattr(backend, "decoder", None)
    room = plan.get("kv_tokens")
    if decoder is None or not isinstance(room, int) or room <= 0:
        return None
    decoder.kv_tokens = room
    return room


def health(
    spec: ModelSpec, backend: ModelBackend, worker_id: str, buckets: list[int]
) -> dict[str, Any]:
    t = backend.timings
    return {
        "worker_id": worker_id,
        "model": backend.name,
        "version": spec.version,
        "device": str(getattr(backend, "device", "?")),
        "buckets": buckets,
        "load_weights_s": round(t.load_weights_s, 3),
        "build_s": round(t.build_s, 3),
        "warm_up_s": round(t.warm_up_s, 3),
        "memory": t.memory,
        "peak_bytes_per_bucket": t.peak_bytes_per_bucket,
    }


def record_warmed(
    settings: Settings, spec: ModelSpec, backend: ModelBackend, worker_id: str, shapes: list[Shape]
) -> None:
    """The first worker to warm a registered version up on a device writes what it measured
    into the version's manifest (in the registry)."""
    if spec.manifest is None:
        return
    t = backend.timings
    warmed = Warmed(
        device=device_name(backend),
        worker=worker_id,
        load_weights_s=round(t.load_weights_s, 3),
        build_s=round(t.build_s, 3),
        warm_up_s=round(t.warm_up_s, 3),
        memory_kind="cuda_peak_allocated" if t.memory_kind.startswith("cuda") else "cpu_peak_rss",
        peak_bytes_per_bucket=t.peak_bytes_per_bucket,
        shapes=[WarmUpShape(bucket=s.bucket, length=s.length, rows=s.rows) for s in shapes],
    )
    try:
        if ModelCatalog.for_writing(settings.sql_url).record_warm_up(
            spec.name, spec.version, warmed
        ):
            log.info("recorded the warm-up of %s on %s in its manifest", spec.ref, warmed.device)
    except Exception:  # the manifest's figures are for people: never a reason not to serve
        log.warning("warm-up figures not recorded in the registry", exc_info=True)


def recent_lengths(
    client: redis.Redis, prefix: str, buckets: list[int]
) -> dict[int, Mapping[int, int]]:
    """The buckets' recent request lengths (none when Redis cannot say: bucket bounds)."""
    try:
        return LengthHistogram(client, prefix).recent(buckets)
    except connections.REDIS_ERRORS:
        log.warning("no recent request lengths (Redis unreachable): warming up at bucket bounds")
        return {}


def fitting(plan: dict[str, Any], buckets: list[int]) -> list[int]:
    """The buckets whose batch of one row fits the plan (all of them when there is no plan)."""
    rows = plan.get("bucket_rows")
    if not isinstance(rows, dict):
        return list(buckets)
    return [b for b in buckets if rows.get(b, 1) > 0]
