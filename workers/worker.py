"""A Celery worker process for a chosen set of bucket queues.

The model is loaded in the process that computes, in three timed stages (load weights,
build, warm up with one batch per bucket at the bucket's length), before the worker consumes
anything: a worker that fails a stage exits without taking work. The pool is ``solo``, so no
process forks after the model (and, on GPU, CUDA) is initialised: run one worker per device.
A generation worker whose backend batches continuously holds ``generation_slots`` batches at
once instead, on as many threads, each with its own reply sink; they only hand rows to the
one decode loop and wait, so the model still runs on one thread.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import redis
from cachetools import FIFOCache
from celery import Task
from celery.signals import worker_ready

from headrace import connections
from headrace.cache.store import open_cache
from headrace.cache.writer import ResultWriter
from headrace.config.settings import Settings
from headrace.health.endpoint import saw
from headrace.health.ready import announce_ready
from headrace.health.tracing import Headers
from headrace.schemas.messages import Batch, Reply, StreamDelta, final_reply
from headrace.schemas.topics import LANES, Topics
from headrace.sessions.store import open_sessions
from headrace.transport import Transport, TransportError, open_transport
from headrace.transport.base import Delivered, Reader
from headrace.usage.meter import UsageMeter
from headrace.workers import metrics, tasks
from headrace.workers.batch_context import BatchContext, ReplySink
from headrace.workers.batch_runner import run_batch
from headrace.workers.cancel_watch import CancelWatch
from headrace.workers.comparisons import Comparisons
from headrace.workers.delivery_hooks import after_delivery, comparing
from headrace.workers.ledger import Ledger, ReplyAt
from headrace.workers.loading import EXIT_NO_ROOM, Loader, LoadFailed, LoadRecords, Stage
from headrace.workers.shadow import run_shadow
from headrace.workers.stall_watch import watch_model
from headrace.workers.startup import (
    admit_by_plan,
    fitting,
    health,
    memory_plan,
    recent_lengths,
    record_warmed,
)
from headrace.workers.tasks import TASK_NAME
from headrace.workers.version_stats import VersionStats
from headrace.workers.warm_up import warm_up_shapes

log = logging.getLogger(__name__)


RETRY_COUNTDOWN_S = 1.0
# Worth one retry of the whole batch: the connection, not the request, was the problem.
# (Out-of-memory splits the batch instead; bad input is answered with its error, never retried.)
TRANSIENT_ERRORS = (redis.ConnectionError, redis.TimeoutError, TransportError, ConnectionError)


class TopicReplySink:
    """Replies go out through an idempotent writer; failed ones are sent again until
    reply_delivery_timeout_s, so a broker or storage outage delays replies instead of
    dropping them."""

    def __init__(self, transport: Transport, settings: Settings) -> None:
        self.transport = transport
        self.out = transport.writer(settings.reply_delivery_timeout_s, idempotent=True)
        self._checker: Reader | None = None  # reads replies back (``missing``)
        self._confirmed: FIFOCache[tuple[ReplyAt, str], None] = FIFOCache(maxsize=100_000)

    def send(self, topic: str, reply: Reply | StreamDelta, headers: Headers = ()) -> None:
        """To ``topic``, which its client made (a worker creates no topic: the dispatcher
        refuses a request whose reply topic does not exist)."""
        value = reply.model_dump_json().encode()
        self.out.send(topic, value, key=reply.request_id.encode(), headers=headers)

    def flush(self) -> list[Delivered]:
        return self.out.flush()

    def missing(self, checks: Sequence[tuple[ReplyAt, str]]) -> list[bool]:
        """For each (where a reply landed, its request id): is that reply not there? Read
        back with one reader kept for it, one pass per partition from the lowest offset
        asked; a reply found once is not read again."""
        out = [False] * len(checks)
        if not self.transport.guarantees.loses_acked_records:
            return out  # the broker keeps what it acknowledged: nothing to read back
        wanted: dict[tuple[str, int], dict[int, list[tuple[int, str]]]] = {}
        for i, (at, request_id) in enumerate(checks):
            if (at, request_id) not in self._confirmed:
                wanted.setdefault((at.topic, at.partition), {}).setdefault(at.offset, []).append(
                    (i, request_id)
                )
        for (topic, partition), offsets in wanted.items():
            found = self._read_back(topic, partition, set(offsets))
            for offset, asked in offsets.items():
                reply = final_reply(found.get(offset, b""))
                for i, request_id in asked:
                    if reply is not None and reply.request_id == request_id:
                        self._confirmed[(ReplyAt(topic, partition, offset), request_id)] = None
                    else:
                        out[i] = True
        return out

    def _read_back(self, topic: str, partition: int, offsets: set[int]) -> dict[int, bytes]:
        if self._checker is None:
            self._checker = self.transport.reader()
        tp = (topic, partition)
        self._checker.assign([topic], start="beginning")
        self._checker.seek(tp, min(offsets))
        found: dict[int, bytes] = {}
        last, idle = max(offsets), 0
        while idle < 2:
            records = self._checker.poll(500).get(tp, [])
            if not records:
                end = self._checker.highwater(tp)
                if end is not None and end <= last:
                    break  # the log ends before the last offset asked: the rest is gone
                idle += 1
                continue
            found.update({r.offset: r.value for r in records if r.offset in offsets})
            if records[-1].offset >= last:
                break
        return found


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
    with a reply sink of its own: a sink's ``flush`` waits for what was sent through it."""
    local = threading.local()

    def here() -> BatchContext:
        mine: BatchContext | None = getattr(local, "ctx", None)
        if mine is None:
            mine = local.ctx = replace(ctx, sink=new_sink())
        return mine

    return here


def serve(settings: Settings, buckets: list[int], loglevel: str = "INFO") -> None:
    unknown = sorted(set(buckets) - set(settings.buckets))
    if unknown:
        raise ValueError(f"buckets {unknown} are not configured ({settings.buckets})")
    worker_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    redis_client = connections.redis_client(settings)
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
    buckets = take_what_fits(plan, buckets, "measured")
    admit_by_plan(backend, plan)  # a continuous decoder's rows within the KV cache's room
    loaded = health(spec, backend, worker_id, buckets) | {"plan": plan}
    t = backend.timings
    metrics.loaded(t.load_weights_s, t.build_s, t.warm_up_s)
    metrics.describe(worker_id, backend.name, spec.version, loaded["device"], buckets)
    metrics.watch_memory(str(getattr(backend, "device", "cpu")))
    print("LOADED " + json.dumps(loaded), flush=True)

    topics = Topics(settings.topic_prefix)
    ledger = Ledger(redis_client, settings.topic_prefix, settings.answered_ttl_s)
    comparisons = Comparisons(redis_client, settings.topic_prefix, spec.name)
    compare_shadow = comparing(comparisons, "shadow", spec.version)
    ctx = BatchContext(
        backend=backend,
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
        before_delivery=ResultWriter(
            open_cache(settings, l1=False, background_l3=True),
            settings,
            spec.version,
        ),
    )
    app = tasks.celery_app(settings)
    # continuous batching: this many batches at once, their rows in one decode loop; an
    # encoder: a few at once, taking turns at the model (BatchContext.model_turn)
    continuous = getattr(backend, "continuous", False)
    slots = settings.generation_slots if continuous else 1
    if continuous:  # its batches ask which rows were cancelled through one watch
        every_s = float(getattr(backend, "cancel_check_s", 0.2))
        ctx = replace(ctx, cancels=CancelWatch(ledger.cancelled, every_s))
    if spec.task == "embed":
        on_gpu = str(getattr(backend, "device", "cpu")).startswith("cuda")
        slots = settings.encoder_slots or (2 if on_gpu else 1)
        if slots > 1:
            ctx = replace(ctx, model_turn=threading.Lock())
    context = (
        per_thread(ctx, lambda: TopicReplySink(open_transport(settings), settings))
        if slots > 1
        else lambda: ctx
    )

    bulk = bulk_runner(settings.bulk_nice)

    @app.task(name=TASK_NAME, acks_late=True, bind=True, max_retries=1)  # type: ignore[untyped-decorator]
    def run_batch_task(task: Task, payload: dict[str, Any]) -> None:
        batch = Batch.model_validate(payload)
        here = context()
        if batch.shadow:
            run_shadow(batch, here, compare_shadow)
            return
        try:
            if batch.lane == "bulk" and bulk is not None:
                bulk.submit(run_batch, batch, here).result()
            else:
                run_batch(batch, here)
        except TRANSIENT_ERRORS as exc:
            log.warning("batch %s hit %r; retrying it once", batch.batch_id, exc)
            ids = [(i.request.tenant, i.request.request_id) for i in batch.items]
            try:
                ledger.release(ids, owner=batch.batch_id)
                ledger.end_batch(batch.batch_id)
            except redis.RedisError:
                pass  # the claims expire; the dispatcher's lease sends the batch again
            raise task.retry(exc=exc, countdown=RETRY_COUNTDOWN_S) from exc

    stop = threading.Event()
    info = {
        "version": spec.version,
        "plan": loaded["plan"].get("bucket_rows", {}),
        "slots": slots,
    }

    def beat() -> None:
        while not stop.is_set():
            try:
                ledger.heartbeat(worker_id, buckets, info)
                saw("redis", True)  # /readyz
            except Exception as exc:  # Redis away: keep trying, the dispatcher sees us as gone
                saw("redis", False, repr(exc))
                log.warning("heartbeat failed", exc_info=True)
            stop.wait(settings.worker_heartbeat_s)

    @worker_ready.connect  # type: ignore[untyped-decorator]
    def _consuming(**_: Any) -> None:
        threading.Thread(target=beat, name="heartbeat", daemon=True).start()
        announce_ready("worker", worker_id)

    def leave() -> None:  # a stalled model: no beat more, out of the live set at once
        stop.set()
        ledger.retire(worker_id, buckets)

    stalls = watch_model(backend, settings.worker_stall_s, leave)

    try:
        worker = app.Worker(
            hostname=f"{worker_id}@headrace",
            pool_cls="threads" if slots > 1 else "solo",
            concurrency=slots,
            # online queues first: the broker is read in this order (tasks.celery_app)
            queues=[topics.queue(b, lane, spec.version) for lane in LANES for b in buckets],
            loglevel=loglevel,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            quiet=True,
        )
        worker.start()
    finally:
        stop.set()
        if stalls is not None:
            stalls.stop()
        if ctx.cancels is not None:
            ctx.cancels.close()
        try:
            ledger.retire(worker_id, buckets)
        except Exception:
            log.warning("could not retire worker from Redis", exc_info=True)
