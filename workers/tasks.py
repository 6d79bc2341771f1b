"""The Celery side shared by the dispatcher and the workers: the app (Redis broker, JSON
only) and the one task's name. Importing this loads Celery, not the model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from celery import Celery

from headrace.config.settings import Settings
from headrace.connections import broker_url
from headrace.schemas.messages import Batch
from headrace.schemas.wire import batch_body
from headrace.workers import broker_fixes, task_body

TASK_NAME = "headrace.run_batch"


def celery_app(settings: Settings) -> Celery:
    """A Celery app on the Redis broker, JSON only (a batch's task is framed JSON,
    ``task_body``), late acks, prefetch 1. A worker reads its queues in the order it lists
    them (kombu's ``priority`` strategy, not round robin): the online lane's before the bulk
    lane's. kombu's Redis channel gets a fix first (``broker_fixes``)."""
    broker_fixes.apply()
    app = Celery("headrace", broker=broker_url(settings))
    app.conf.update(
        task_serializer="json",
        accept_content=["json", task_body.SERIALIZER],
        result_serializer="json",
        task_ignore_result=True,
        result_backend=None,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": 3600, "queue_order_strategy": "priority"},
        worker_send_task_events=False,
        task_send_sent_event=False,
    )
    return app


def task_args(batch: Batch) -> list[str]:
    """The task's arguments: the batch as one JSON string (pydantic's serializer in Rust:
    3.1 against 5.4 us a request, measured for a 14-row batch, for building the batch's dict
    and encoding it in Python), which the message's body carries as it is (``task_body``)."""
    return [batch_body(batch)]


def batch_of(payload: str | dict[str, Any]) -> Batch:
    """The batch a task was sent: a JSON string, or an object (what dispatchers before
    2026-12-07 sent, still in a queue during an upgrade)."""
    if isinstance(payload, str):
        return Batch.model_validate_json(payload)
    return Batch.model_validate(payload)


class BatchSend(Protocol):
    def __call__(self, batch: Batch, queue: str, countdown: float | None = None) -> None: ...


def batch_sender(settings: Settings, framed: Callable[[], bool] | None = None) -> BatchSend:
    """Sends a batch to a bucket's queue as the one task, ``countdown`` seconds from now
    (None: at once): framed (``task_body``) while ``framed()`` says every worker that may
    take it reads that (the dispatcher asks the workers' beats: ``WorkersWatch.framed``),
    else plain JSON, which every worker reads (no ``framed``: always)."""
    app = celery_app(settings)

    def send(batch: Batch, queue: str, countdown: float | None = None) -> None:
        # argsrepr: what Celery logs and shows for the task; by default a repr of the
        # arguments (request texts, in the message's headers), which cost 0.24 ms a batch.
        # declare=[]: no queue declaration on every send. Celery publishes to a direct queue
        # through the anonymous exchange (on Redis, an LPUSH onto the queue's list), which
        # needs no binding, and each worker declares the queues it consumes; the cached
        # declaration check cost a quarter of the send's CPU (docs/benchmarks.md).
        # serializer: the batch's JSON framed, not quoted (task_body), once workers read it.
        app.send_task(
            TASK_NAME,
            args=task_args(batch),
            queue=queue,
            serializer=task_body.SERIALIZER if framed is not None and framed() else "json",
            argsrepr=f"batch {batch.batch_id}",
            kwargsrepr="",
            countdown=countdown,
            declare=[],
        )

    return send
