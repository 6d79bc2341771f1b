"""``/v1/batches`` as OpenAI serves it: create (``completion_window`` is ``24h``, or a shorter
window written the same way, e.g. ``90s``, ``30m``), retrieve, list (``after`` cursor and
``has_more``, newest first), cancel from ``validating``, ``in_progress`` or ``finalizing``
(it ends ``cancelled``, the lines answered so far in its output file; cancelling a finished
batch is 409). ``request_counts``, ``usage``, ``errors`` and ``metadata`` in OpenAI's shape."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, field_validator

from headrace.config.settings import Settings
from headrace.gateway.api import ApiError, Tenant
from headrace.gateway.caps import check_open_jobs
from headrace.gateway.config import GatewayConfig
from headrace.gateway.files_api import list_page, owned_file, unix
from headrace.jobs.launch import new_job
from headrace.jobs.lifecycle import IllegalTransition, JobStatus
from headrace.jobs.store import JobNotFound, JobStore
from headrace.jobs.tables import Job
from headrace.jobs.usage import seconds_of

MAX_WINDOW_S = 24 * 3600


def window_seconds(window: str) -> int:
    """``24h`` (OpenAI's only value) or a shorter window in the same form."""
    try:
        seconds = seconds_of(window)
    except ValueError:
        raise ValueError("completion_window: a duration such as 24h, 30m or 90s") from None
    if not 1 <= seconds <= MAX_WINDOW_S:
        raise ValueError("completion_window: between 1s and 24h")
    return seconds


class BatchCreate(BaseModel):
    input_file_id: str
    endpoint: Literal["/v1/embeddings", "/v1/completions", "/v1/chat/completions"]
    completion_window: str = "24h"
    metadata: dict[str, str] | None = Field(default=None, max_length=16)

    @field_validator("completion_window")
    @classmethod
    def _window(cls, value: str) -> str:
        window_seconds(value)
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for k, v in (value or {}).items():
            if len(k) > 64 or len(v) > 512:
                raise ValueError("metadata: keys up to 64 characters, values up to 512")
        return value


def window_of(job: Job) -> str:
    if job.expires_at is None:
        return "24h"
    seconds = round((job.expires_at - job.created_at).total_seconds())
    return "24h" if seconds == MAX_WINDOW_S else f"{seconds}s"


def batch_object(job: Job) -> dict[str, Any]:
    errors = [
        {
            "code": e.get("code"),
            "message": e.get("message"),
            "param": e.get("param"),
            "line": e.get("line"),
        }
        for e in job.errors
    ]
    tokens = {"input_tokens": job.input_tokens, "output_tokens": job.output_tokens}
    return {
        "id": job.id,
        "object": "batch",
        "endpoint": job.endpoint,
        "model": job.model,
        "errors": {"object": "list", "data": errors} if errors else None,
        "input_file_id": job.input_file_id,
        "completion_window": window_of(job),
        "status": job.status,
        "output_file_id": job.output_file_id,
        "error_file_id": job.error_file_id,
        "created_at": unix(job.created_at),
        "in_progress_at": unix(job.in_progress_at),
        "expires_at": unix(job.expires_at),
        "finalizing_at": unix(job.finalizing_at),
        "completed_at": unix(job.completed_at),
        "failed_at": unix(job.failed_at),
        "expired_at": unix(job.expired_at),
        "cancelling_at": unix(job.cancelling_at),
        "cancelled_at": unix(job.cancelled_at),
        "request_counts": {"total": job.total, "completed": job.completed, "failed": job.failed},
        "usage": {
            **tokens,
            "total_tokens": job.input_tokens + job.output_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
        "metadata": job.metadata_ or None,
    }


def owned_job(store: JobStore, batch_id: str, tenant: str, kind: str = "batch") -> Job:
    try:
        job = store.get(batch_id, tenant)
    except JobNotFound:
        job = None
    if job is None or job.kind != kind:
        raise ApiError(404, f"no {kind} {batch_id}", f"{kind}_not_found", param=f"{kind}_id")
    return job


def batches_router(settings: Settings, config: GatewayConfig, store: JobStore) -> APIRouter:
    """``settings``: handed on to the job machinery (``new_job``)."""
    router = APIRouter()

    @router.post("/v1/batches")
    def create_batch(tenant: Tenant, body: BatchCreate) -> dict[str, Any]:
        source = owned_file(store, body.input_file_id, tenant)
        check_open_jobs(store, config.tenant_max_open_jobs, tenant)
        if source.purpose != "batch":
            message = f"{source.id} has purpose {source.purpose!r}; a batch reads 'batch' files"
            raise ApiError(400, message, "invalid_value", param="input_file_id")
        job = new_job(
            store,
            settings,
            source.location,
            tenant=tenant,
            metadata=body.metadata,
            endpoint=body.endpoint,
            completion_window_s=window_seconds(body.completion_window),
        )
        store.set_fields(job.id, input_file_id=source.id)
        return batch_object(store.get(job.id))  # a runner pool takes it within job_poll_s

    @router.get("/v1/batches/{batch_id}")
    def get_batch(tenant: Tenant, batch_id: str) -> dict[str, Any]:
        return batch_object(owned_job(store, batch_id, tenant))

    @router.get("/v1/batches")
    def list_batches(
        tenant: Tenant,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        after: str | None = None,
    ) -> dict[str, Any]:
        if after is not None:
            owned_job(store, after, tenant)
        jobs = store.list(tenant=tenant, limit=limit + 1, after=after, kind="batch")
        return list_page([batch_object(j) for j in jobs], limit)

    @router.post("/v1/batches/{batch_id}/cancel")
    def cancel_batch(tenant: Tenant, batch_id: str) -> dict[str, Any]:
        job = owned_job(store, batch_id, tenant)
        if job.state is not JobStatus.cancelling:
            try:  # the lifecycle refuses a finished batch, under the row lock
                store.move(job.id, JobStatus.cancelling)
            except IllegalTransition:
                status = store.get(job.id).status
                message = f"batch {batch_id} is {status}: there is nothing to cancel"
                raise ApiError(409, message, "batch_not_cancellable", param="batch_id") from None
        return batch_object(store.get(job.id))

    return router
