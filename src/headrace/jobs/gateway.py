"""The HTTP gateway (``headrace gateway``): an OpenAI-compatible face on the pipeline.

Files and batches as in the OpenAI Batch API, and synchronous ``POST /v1/embeddings``
through the pipeline. Bearer API keys map to tenants (the store keeps only their SHA-256);
a tenant sees only its own files and batches: anybody else's are 404. Errors come in
OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import threading
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import FastAPI, File, Form, HTTPException, Request, UploadFile
from fastapi.responses import FileResponse, JSONResponse
from pydantic import AnyHttpUrl, BaseModel, Field

from headrace.config.settings import Settings
from headrace.jobs.api import ApiError, Tenant, api_error, reply_error
from headrace.jobs.completions import completions_router
from headrace.jobs.files import is_s3
from headrace.jobs.launch import new_job, start_detached
from headrace.jobs.lifecycle import FINAL, JobStatus
from headrace.jobs.single import KIND, job_object
from headrace.jobs.store import Job, JobNotFound, JobStore
from headrace.producers.client import Client
from headrace.schemas.errors import HeadraceError
from headrace.schemas.messages import EmbeddingResult
from headrace.schemas.openai_batch import EMBEDDINGS_URL


class BatchCreate(BaseModel):
    input_file_id: str
    endpoint: Literal["/v1/embeddings", "/v1/completions", "/v1/chat/completions"]
    completion_window: Literal["24h"] = "24h"
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


class JobCreate(BaseModel):
    model: str = "all-MiniLM-L6-v2"
    input: str = Field(min_length=1)
    webhook_url: AnyHttpUrl | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)


class EmbeddingsCreate(BaseModel):
    model: str
    input: str | list[str]
    encoding_format: Literal["float"] = "float"


def _unix(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def batch_object(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "object": "batch",
        "endpoint": job.endpoint,
        "errors": {"object": "list", "data": job.errors} if job.errors else None,
        "input_file_id": job.input_file_id,
        "completion_window": "24h",
        "status": job.status,
        "output_file_id": job.output_file_id,
        "error_file_id": job.error_file_id,
        "created_at": _unix(job.created_at),
        "in_progress_at": _unix(job.in_progress_at),
        "expires_at": _unix(job.expires_at),
        "finalizing_at": _unix(job.finalizing_at),
        "completed_at": _unix(job.completed_at),
        "failed_at": _unix(job.failed_at),
        "expired_at": _unix(job.expired_at),
        "cancelling_at": _unix(job.cancelling_at),
        "cancelled_at": _unix(job.cancelled_at),
        "request_counts": {"total": job.total, "completed": job.completed, "failed": job.failed},
        "metadata": job.metadata_ or None,
    }


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    store = JobStore(settings.sql_url)
    files_dir = (settings.state_dir / "files").resolve()
    clients: dict[str, Client] = {}
    clients_lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        for client in clients.values():
            client.close()

    app = FastAPI(title="headrace gateway", version="1", lifespan=lifespan)
    app.state.store = store

    def client_for(tenant: str) -> Client:
        with clients_lock:
            if tenant not in clients:
                clients[tenant] = Client(settings, tenant=tenant)
            return clients[tenant]

    @app.exception_handler(HTTPException)
    async def _openai_error(_: Request, exc: HTTPException) -> JSONResponse:
        code = getattr(exc, "code", None)
        kind = getattr(exc, "kind", "invalid_request_error")
        body = {"error": {"message": exc.detail, "type": kind, "param": None, "code": code}}
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    def file_object(record: Any) -> dict[str, Any]:
        return {
            "id": record.id,
            "object": "file",
            "bytes": record.bytes,
            "created_at": _unix(record.created_at),
            "filename": record.filename,
            "purpose": record.purpose,
        }

    # --- files -----------------------------------------------------------------------------
    @app.post("/v1/files")
    def upload(
        tenant: Tenant, file: Annotated[UploadFile, File()], purpose: Annotated[str, Form()]
    ) -> dict[str, Any]:
        if purpose != "batch":
            raise ApiError(400, f"purpose {purpose!r} is not supported; use 'batch'", "bad_purpose")
        files_dir.mkdir(parents=True, exist_ok=True)
        target = files_dir / f"upload-{uuid.uuid4().hex}.jsonl"
        with open(target, "wb") as out:
            shutil.copyfileobj(file.file, out)  # streamed: a large file is not held in memory
        record = store.add_file(tenant, purpose, file.filename or "upload.jsonl", str(target))
        return file_object(record)

    @app.get("/v1/files/{file_id}")
    def file_info(tenant: Tenant, file_id: str) -> dict[str, Any]:
        return file_object(_file(store, file_id, tenant))

    @app.get("/v1/files/{file_id}/content")
    def file_content(tenant: Tenant, file_id: str) -> FileResponse:
        record = _file(store, file_id, tenant)
        if is_s3(record.location) or not Path(record.location).exists():
            raise ApiError(404, f"the content of {file_id} is gone", "file_not_found")
        return FileResponse(record.location, media_type="application/jsonl")

    # --- batches ---------------------------------------------------------------------------
    @app.post("/v1/batches")
    def create_batch(tenant: Tenant, body: BatchCreate) -> dict[str, Any]:
        source = _file(store, body.input_file_id, tenant)
        job = new_job(
            store,
            settings,
            source.location,
            tenant=tenant,
            metadata=body.metadata,
            endpoint=body.endpoint,
        )
        store.set_fields(job.id, input_file_id=source.id)
        start_detached(settings, job.id)
        return batch_object(store.get(job.id))

    @app.get("/v1/batches/{batch_id}")
    def get_batch(tenant: Tenant, batch_id: str) -> dict[str, Any]:
        return batch_object(_job(store, batch_id, tenant))

    @app.get("/v1/batches")
    def list_batches(tenant: Tenant, limit: int = 20) -> dict[str, Any]:
        jobs = store.list(tenant=tenant, limit=min(limit, 100))
        data = [batch_object(j) for j in jobs if j.metadata_.get("kind") != KIND]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(data) == limit,
        }

    @app.post("/v1/batches/{batch_id}/cancel")
    def cancel_batch(tenant: Tenant, batch_id: str) -> dict[str, Any]:
        job = _job(store, batch_id, tenant)
        if job.state not in FINAL and job.state is not JobStatus.cancelling:
            store.move(job.id, JobStatus.cancelling)
        return batch_object(store.get(job.id))

    # --- single asynchronous jobs ---------------------------------------------------------
    @app.post("/v1/jobs")
    def create_job(tenant: Tenant, body: JobCreate) -> dict[str, Any]:
        files_dir.mkdir(parents=True, exist_ok=True)
        source = files_dir / f"job-{uuid.uuid4().hex}.jsonl"
        line = {
            "custom_id": "job",
            "method": "POST",
            "url": EMBEDDINGS_URL,
            "body": {"model": body.model, "input": body.input},
        }
        source.write_text(json.dumps(line) + "\n", encoding="utf-8")
        metadata: dict[str, str] = {**(body.metadata or {}), "kind": KIND}
        if body.webhook_url is not None:
            metadata["webhook_url"] = str(body.webhook_url)
        job = new_job(store, settings, str(source), tenant=tenant, metadata=metadata)
        start_detached(settings, job.id)
        return job_object(store.get(job.id))

    @app.get("/v1/jobs/{job_id}")
    def get_job(tenant: Tenant, job_id: str) -> dict[str, Any]:
        job = _job(store, job_id, tenant)
        if job.metadata_.get("kind") != KIND:
            raise ApiError(404, f"no job {job_id}", "job_not_found")
        return job_object(job)

    app.include_router(completions_router(client_for))

    # --- synchronous embeddings --------------------------------------------------------------
    @app.post(EMBEDDINGS_URL)
    async def embeddings(tenant: Tenant, body: EmbeddingsCreate) -> dict[str, Any]:
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts or len(texts) > 2048:
            raise ApiError(400, "input: 1 to 2048 texts", "invalid_input")
        client = client_for(tenant)
        try:
            submissions = await asyncio.to_thread(client.submit_many, texts, model=body.model)
            replies = await asyncio.wait_for(
                asyncio.gather(*(asyncio.wrap_future(s.future) for s in submissions)), 120
            )
        except (HeadraceError, TimeoutError) as exc:
            raise api_error(exc) from exc
        data, tokens = [], 0
        for i, reply in enumerate(replies):
            if reply.error is not None:
                raise reply_error(reply.error)
            assert isinstance(reply.result, EmbeddingResult)
            tokens += reply.result.token_count
            data.append({"object": "embedding", "index": i, "embedding": reply.result.embedding})
        return {
            "object": "list",
            "data": data,
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return app


def _file(store: JobStore, file_id: str, tenant: str) -> Any:
    try:
        return store.get_file(file_id, tenant)
    except JobNotFound:
        raise ApiError(404, f"no file {file_id}", "file_not_found") from None


def _job(store: JobStore, batch_id: str, tenant: str) -> Job:
    try:
        return store.get(batch_id, tenant)
    except JobNotFound:
        raise ApiError(404, f"no batch {batch_id}", "batch_not_found") from None
