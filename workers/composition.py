"""The worker's composition root: load the model within the device's memory plan
(``load_model``) and build what every batch runs with (``build_context``, ``Slots``) from
``Settings``, once. ``worker.serve`` binds the result to Celery; tests build a context of
their own (in-memory ledger and transport) around the same ``run_batch``."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import redis

from headrace.cache.store import open_cache
from headrace.cache.writer import ResultWriter
from headrace.config.settings import Settings
from headrace.models.registry import ModelSpec
from headrace.sessions.store import open_sessions
from headrace.transport import open_transport
from headrace.usage.meter import UsageMeter
from headrace.workers import metrics
from headrace.workers.backends.base import ModelBackend
from headrace.workers.batch_context import BatchContext, ReplySink
from headrace.workers.cancel_watch import CancelWatch
from headrace.workers.comparisons import Comparisons
from headrace.workers.delivery_hooks import after_delivery, comparing
from headrace.workers.ledger import Ledger
from headrace.workers.loading import EXIT_NO_ROOM, Loader, LoadFailed, LoadRecords, Stage
from headrace.workers.reply_sink import TopicReplySink
from headrace.workers.startup import (
    admit_by_plan,
    fitting,
    health,
    memory_plan,
    recent_lengths,
    record_warmed,
)
from headrace.workers.version_stats import VersionStats
from headrace.workers.warm_up import warm_up_shapes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    """A model loaded, warmed and measured: the buckets it takes and its memory plan."""

    spec: ModelSpec
    backend: ModelBackend
    buckets: list[int]
    plan: dict[str, Any]


def load_model(
    settings: Settings, buckets: list[int], worker_id: str, redis_client: redis.Redis
) -> Loaded:
    """The three timed stages (weights, build, warm-up at recent lengths), then the buckets
    whose batch fits the measured memory plan; prints the LOADED line."""
    loader = Loader(settings, worker_id, LoadRecords(redis_client, settings.topic_prefix))
    spec = loader.spec
    if (spec.path / "config.json").is_file():  # files here already (a remote source's are
        # fetched in the load_weights stage, under its limit; the measured plan applies then)
        buckets = take_what_fits(memory_plan(settings, spec, None, buckets), buckets, "estimated")
    shapes = warm_up_shapes(
        buckets,
        recent_lengths(redis_client, settings.topic_prefix, buckets),
        rows=settings.warm_up_rows,
        max_tokens=spec.max_tokens,
    )
    backend = loader.load(shapes)
    record_warmed(settings, spec, backend, worker_id, shapes)
    plan = memory_plan(settings, spec, backend, buckets)
    for warning in plan.get("warnings", []):  # in the LOADED line too
        log.warning("memory plan: %s", warning)
    buckets = take_what_fits(plan, buckets, "measured")
    admit_by_plan(backend, plan)  # a continuous decoder's rows within the KV cache's room
    loaded = health(spec, backend, worker_id, buckets) | {"plan": plan}
    t = backend.timings
    metrics.loaded(t.load_weights_s, t.build_s, t.warm_up_s)
    metrics.describe(worker_id, backend.name, spec.version, loaded["device"], buckets)
    metrics.watch_memory(str(getattr(backend, "device", "cpu")))
    metrics.watch_decoder(backend)
    print("LOADED " + json.dumps(loaded), flush=True)
    return Loaded(spec, backend, buckets, plan)


def build_context(
    settings: Settings,
    loaded: Loaded,
    worker_id: str,
    redis_client: redis.Redis,
    ledger: Ledger,
) -> BatchContext:
    """What every batch of this worker runs with: the model, the ledger, the reply sink,
    the cache's write-through, usage and version statistics, shadow comparisons."""
    spec = loaded.spec
    comparisons = Comparisons(redis_client, settings.topic_prefix, spec.name)
    return BatchContext(
        backend=loaded.backend,
        ledger=ledger,
        sink=TopicReplySink(open_transport(settings), settings),
        worker_id=worker_id,
        claim_ms=int(settings.lease_base_s * 1000),
        sending_ms=int((settings.reply_delivery_timeout_s + 30) * 1000),
        heartbeat_s=settings.worker_heartbeat_s,
        buckets=list(settings.buckets),
        sessions=open_sessions(settings) if spec.task == "generate" else None,
        after_delivery=after_delivery(
            UsageMeter(redis_client, settings.topic_prefix),
            VersionStats(redis_client, settings.topic_prefix, spec.name),
            spec.version,
        ),
        model_version=spec.version,
        shadowed=comparing(comparisons, "served", spec.version),
        claim_beside=ThreadPoolExecutor(max_workers=2, thread_name_prefix="claim"),
        before_delivery=ResultWriter(
            open_cache(settings, l1=False, background_l3=True),
            settings,
            spec.version,
        ),
    )


@dataclass(frozen=True)
class Slots:
    """How many batches the worker holds at once, and the context each batch thread gets."""

    count: int
    root: BatchContext  # the one built (its cancel watch is closed at the end)
    context: Callable[[], BatchContext]
    # the context of a thread beside the pool's (the hand-off desk's): a sink of its own
    aside: Callable[[], BatchContext]


def slots_for(settings: Settings, loaded: Loaded, ctx: BatchContext) -> Slots:
    """Continuous batching: ``generation_slots`` batches at once, their rows in one decode
    loop, asking which rows were cancelled through one watch; an encoder: a few at once,
    taking turns at the model (``BatchContext.model_turn``); else one."""
    backend = loaded.backend
    continuous = getattr(backend, "continuous", False)
    count = settings.generation_slots if continuous else 1
    if continuous:
        every_s = float(getattr(backend, "cancel_check_s", 0.2))
        ctx = replace(ctx, cancels=CancelWatch(ctx.ledger.cancelled, every_s))
    if loaded.spec.task != "generate":  # an encoder: embed, rerank, classify
        count = settings.encoder_slots
    if not continuous and (count > 1 or settings.handoff):
        # batches on several threads (the pool's, the hand-off desk's) take turns at the
        # model; a continuous decoder's one loop takes every thread's rows itself
        ctx = replace(ctx, model_turn=threading.Lock())
    root = ctx
    sink = ctx.sink
    threads = per_thread(
        root,
        sink.sibling
        if isinstance(sink, TopicReplySink)
        else lambda: TopicReplySink(open_transport(settings), settings),
    )
    if count == 1:
        return Slots(1, root, lambda: root, threads)
    return Slots(count, root, threads, threads)


def take_what_fits(plan: dict[str, Any], buckets: list[int], how: str) -> list[int]:
    """The buckets this worker takes: those whose batch of one row fits its memory plan.
    None fitting ends the worker (LoadFailed, exit 5)."""
    kept = fitting(plan, buckets)
    if not kept:
        raise LoadFailed(
            Stage.build,
            "no_room",
            f"no bucket of {buckets} fits this device's memory ({how} plan: {plan})",
            EXIT_NO_ROOM,
        )
    if kept != buckets:
        log.warning(
            "memory plan (%s): bucket(s) %s do not fit; taking %s",
            how,
            sorted(set(buckets) - set(kept)),
            kept,
        )
    return kept


def bulk_runner(nice: int) -> ThreadPoolExecutor | None:
    """One thread at niceness ``nice`` for bulk batches (Linux sets a thread's priority by
    its id): with one torch thread a batch's model work runs in it, so the operating system
    gives online batches, the dispatcher and the broker the CPU first. None: nice 0."""
    if nice <= 0:
        return None

    def lower() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        except OSError:  # not allowed here: bulk runs at the same priority
            log.warning("could not lower the bulk thread's priority", exc_info=True)

    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="bulk", initializer=lower)


def per_thread(ctx: BatchContext, new_sink: Callable[[], ReplySink]) -> Callable[[], BatchContext]:
    """With several batches at once (continuous batching), each batch thread gets the context
    with a reply sink of its own: a sink's ``flush`` says where its own replies landed (the
    sinks share one connection to the broker: ``TopicReplySink.sibling``)."""
    local = threading.local()

    def here() -> BatchContext:
        mine: BatchContext | None = getattr(local, "ctx", None)
        if mine is None:
            mine = local.ctx = replace(ctx, sink=new_sink())
        return mine

    return here
