"""A Celery worker process for a chosen set of bucket queues: the thin binding of the
composition root (``composition``) to Celery's task, heartbeat and worker.

The model is loaded in the process that computes, in three timed stages (load weights,
build, warm up with one batch per bucket at the bucket's length), before the worker consumes
anything: a worker that fails a stage exits without taking work. The pool is ``solo``, so no
process forks after the model (and, on GPU, CUDA) is initialised: run one worker per device.
A generation worker whose backend batches continuously holds ``generation_slots`` batches at
once instead, on as many threads, each with its own reply sink; they only hand rows to the
one decode loop and wait, so the model still runs on one thread.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import redis
from celery import Task
from celery.signals import worker_ready

from headrace import connections
from headrace.config.settings import Settings
from headrace.health.endpoint import saw
from headrace.health.ready import announce_ready
from headrace.schemas.messages import Batch
from headrace.schemas.topics import LANES, Topics
from headrace.transport import TransportError
from headrace.workers import task_body, tasks
from headrace.workers.batch_context import BatchContext
from headrace.workers.batch_runner import run_batch
from headrace.workers.collector import tune_collector
from headrace.workers.comparisons import Comparisons
from headrace.workers.composition import build_context, bulk_runner, load_model, slots_for
from headrace.workers.delivery_hooks import comparing
from headrace.workers.handoff import Entry, Inbox
from headrace.workers.handoff_desk import Desk
from headrace.workers.ledger import RedisLedger
from headrace.workers.shadow import run_shadow
from headrace.workers.stall_watch import watch_model
from headrace.workers.tasks import TASK_NAME, batch_of

log = logging.getLogger(__name__)


RETRY_COUNTDOWN_S = 1.0
DESK_READY_S = 10.0  # the most a worker's readiness waits for its hand-off desk
# Worth one retry of the whole batch: the connection, not the request, was the problem.
# (Out-of-memory splits the batch instead; bad input is answered with its error, never retried.)
TRANSIENT_ERRORS = (redis.ConnectionError, redis.TimeoutError, TransportError, ConnectionError)


def serve(settings: Settings, buckets: list[int], loglevel: str = "INFO") -> None:
    unknown = sorted(set(buckets) - set(settings.buckets))
    if unknown:
        raise ValueError(f"buckets {unknown} are not configured ({settings.buckets})")
    worker_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    redis_client = connections.redis_client(settings)
    loaded = load_model(settings, buckets, worker_id, redis_client)
    spec, buckets = loaded.spec, loaded.buckets
    ledger = RedisLedger(redis_client, settings.topic_prefix, settings.answered_ttl_s)
    slots = slots_for(
        settings, loaded, build_context(settings, loaded, worker_id, redis_client, ledger)
    )
    compare_shadow = comparing(
        Comparisons(redis_client, settings.topic_prefix, spec.name), "shadow", spec.version
    )
    topics = Topics(settings.topic_prefix)
    app = tasks.celery_app(settings)
    bulk = bulk_runner(settings.bulk_nice)
    send = tasks.batch_sender(settings)
    queues = [topics.queue(b, lane, spec.version) for lane in LANES for b in buckets]

    def compute(batch: Batch, here: BatchContext) -> None:
        if batch.shadow:
            run_shadow(batch, here, compare_shadow)
        elif batch.lane == "bulk" and bulk is not None:
            bulk.submit(run_batch, batch, here).result()
        else:
            run_batch(batch, here)

    def let_go(batch: Batch, exc: Exception) -> None:
        """A connection failed the batch: its claims released for the one retry."""
        log.warning("batch %s hit %r; retrying it once", batch.batch_id, exc)
        ids = [(i.request.tenant, i.request.request_id) for i in batch.items]
        try:
            ledger.release(ids, owner=batch.batch_id)
            ledger.end_batch(batch.batch_id)
        except redis.RedisError:
            pass  # the claims expire; the dispatcher's lease sends the batch again

    def handed(entry: Entry, sent: Callable[[], None]) -> None:
        batch = entry.batch()
        try:
            compute(batch, replace(slots.aside(), replies_sent=sent))
        except TRANSIENT_ERRORS as exc:
            let_go(batch, exc)
            send(batch, entry.queue, countdown=RETRY_COUNTDOWN_S)

    desk = (
        Desk(
            Inbox(
                redis_client,
                settings.topic_prefix,
                worker_id,
                [topics.queue(b, "online", spec.version) for b in buckets],
            ),
            handed,
            give_back=lambda entry: send(entry.batch(), entry.queue),
            prepare=slots.aside,  # its own reply sink, connected before the first batch
        )
        if settings.handoff
        else None
    )

    @app.task(name=TASK_NAME, acks_late=True, bind=True, max_retries=1)  # type: ignore[untyped-decorator]
    def run_batch_task(task: Task, payload: str | dict[str, Any]) -> None:
        batch = batch_of(payload)
        if desk is None:
            here, ended = slots.context(), None
        else:
            ended = desk.task_started()
            here = replace(slots.context(), replies_sent=ended)
        try:
            compute(batch, here)
        except TRANSIENT_ERRORS as exc:
            let_go(batch, exc)
            raise task.retry(exc=exc, countdown=RETRY_COUNTDOWN_S) from exc
        finally:
            if ended is not None:
                ended()

    stop = threading.Event()
    info = {
        "version": spec.version,
        "plan": loaded.plan.get("bucket_rows", {}),
        "slots": slots.count,
        task_body.WORKER_READS: [task_body.SERIALIZER],  # framed batches (and plain JSON)
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
        # the model, Celery and the clients are up: what is alive now is never walked again
        # (a full collection over the model's objects stalled a batch 378 ms: collector.py)
        tune_collector()
        threading.Thread(target=beat, name="heartbeat", daemon=True).start()
        # ready on both paths: the first lone request is handed over too, not sent by Celery
        # while the desk still connects its reply sink
        if desk is not None and not desk.start().idle.wait(DESK_READY_S):
            log.warning("hand-off desk not idle after %.0f s; ready without it", DESK_READY_S)
        announce_ready("worker", worker_id)

    def leave() -> None:  # a stalled model: no beat more, out of the live set at once
        stop.set()
        ledger.retire(worker_id, buckets)

    stalls = watch_model(loaded.backend, settings.worker_stall_s, leave)

    try:
        worker = app.Worker(
            hostname=f"{worker_id}@headrace",
            pool_cls="threads" if slots.count > 1 else "solo",
            concurrency=slots.count,
            # online queues first: the broker is read in this order (tasks.celery_app)
            queues=queues,
            loglevel=loglevel,
            without_heartbeat=True,
            without_mingle=True,
            without_gossip=True,
            quiet=True,
        )
        worker.start()
    finally:
        stop.set()
        if desk is not None:
            try:
                desk.close()  # what its inbox holds goes to Celery's queues
            except Exception:
                log.warning("hand-off inbox not emptied (dispatchers send it again)", exc_info=True)
        if stalls is not None:
            stalls.stop()
        if slots.root.cancels is not None:
            slots.root.cancels.close()
        try:
            ledger.retire(worker_id, buckets)
        except Exception:
            log.warning("could not retire worker from Redis", exc_info=True)
