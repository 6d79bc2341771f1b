"""``/v1/files`` as OpenAI serves it: upload (purpose ``batch``, at most ``max_file_bytes``,
``expires_after`` {anchor created_at, seconds 3600 to 30 days}: then it is gone, and a runner
pool removes it; a tenant's files and bytes capped by ``tenant_max_files`` and
``tenant_max_file_bytes``),
list (``purpose`` filter, ``after`` cursor, ``limit``, ``order``), retrieve, content, delete
(the content goes with it: later reads are 404; a file an unfinished batch still reads is
409). A tenant sees only its own files."""

from __future__ import annotations

import contextlib
import uuid
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, Form, Query, UploadFile
from fastapi.responses import FileResponse

from headrace.gateway.api import ApiError, Tenant
from headrace.gateway.config import GatewayConfig
from headrace.jobs.files import disk_full, is_s3
from headrace.jobs.store import JobNotFound, JobStore
from headrace.jobs.tables import File as FileRecord

UPLOAD_PURPOSES = ("batch",)  # what a user may upload; "batch_output" is written by jobs
MIN_EXPIRY_S, MAX_EXPIRY_S = 3600, 30 * 24 * 3600  # OpenAI's bounds of expires_after
CHUNK = 1 << 20


def unix(moment: datetime | None) -> int | None:
    return int(moment.timestamp()) if moment is not None else None


def file_object(record: FileRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "object": "file",
        "bytes": record.bytes,
        "created_at": unix(record.created_at),
        "filename": record.filename,
        "purpose": record.purpose,
        "status": "processed",
        "status_details": None,
        "expires_at": unix(record.expires_at),
    }


def owned_file(store: JobStore, file_id: str, tenant: str) -> FileRecord:
    try:
        return store.get_file(file_id, tenant)
    except JobNotFound:
        raise ApiError(404, f"no file {file_id}", "file_not_found", param="file_id") from None


def list_page(data: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """A cursor page as the SDKs read it: ``limit + 1`` rows fetched tell ``has_more``."""
    page = data[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(data) > limit,
    }


def files_router(config: GatewayConfig, store: JobStore) -> APIRouter:
    router = APIRouter()
    files_dir = config.files_dir

    @router.post("/v1/files")
    def upload(
        tenant: Tenant,
        file: Annotated[UploadFile, File()],
        purpose: Annotated[str, Form()],
        expires_anchor: Annotated[
            Literal["created_at"] | None, Form(alias="expires_after[anchor]")
        ] = None,
        expires_seconds: Annotated[
            int | None, Form(alias="expires_after[seconds]", ge=MIN_EXPIRY_S, le=MAX_EXPIRY_S)
        ] = None,
    ) -> dict[str, Any]:
        if purpose not in UPLOAD_PURPOSES:
            message = f"purpose {purpose!r} is not supported; use one of {list(UPLOAD_PURPOSES)}"
            raise ApiError(400, message, "invalid_value", param="purpose")
        if (expires_anchor is None) != (expires_seconds is None):
            message = "expires_after needs both anchor (created_at) and seconds"
            raise ApiError(400, message, "invalid_value", param="expires_after")
        held, held_bytes = store.file_totals(tenant)
        if config.tenant_max_files and held >= config.tenant_max_files:
            message = (
                f"this tenant holds {held} files, its cap (tenant_max_files); delete some first"
            )
            raise ApiError(429, message, "files_limit_exceeded", param="file")
        files_dir.mkdir(parents=True, exist_ok=True)
        target = files_dir / f"upload-{uuid.uuid4().hex}.jsonl"
        size = 0
        try:
            with open(target, "wb") as out:  # streamed: a large file is not held in memory
                while chunk := file.file.read(CHUNK):
                    size += len(chunk)
                    if size > config.max_file_bytes:
                        out.close()
                        target.unlink(missing_ok=True)
                        message = f"the file is larger than {config.max_file_bytes} bytes"
                        raise ApiError(400, message, "file_too_large", param="file")
                    out.write(chunk)
        except OSError as exc:
            target.unlink(missing_ok=True)
            if not disk_full(exc):
                raise
            message = "no space left on the gateway's disk for the upload; try again later"
            raise ApiError(507, message, "disk_full", param="file") from exc
        cap = config.tenant_max_file_bytes
        if cap and held_bytes + size > cap:
            target.unlink(missing_ok=True)
            message = (
                f"this tenant's files would take {held_bytes + size} bytes, past its cap of "
                f"{cap} (tenant_max_file_bytes); delete some first"
            )
            raise ApiError(429, message, "storage_limit_exceeded", param="file")
        record = store.add_file(
            tenant, purpose, file.filename or "upload.jsonl", str(target), expires_seconds
        )
        return file_object(record)

    @router.get("/v1/files")
    def list_files(
        tenant: Tenant,
        purpose: str | None = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 10_000,
        after: str | None = None,
        order: Literal["asc", "desc"] = "desc",
    ) -> dict[str, Any]:
        if after is not None:
            owned_file(store, after, tenant)
        rows = store.list_files(tenant, purpose, limit + 1, after, newest_first=order == "desc")
        return list_page([file_object(r) for r in rows], limit)

    @router.get("/v1/files/{file_id}")
    def file_info(tenant: Tenant, file_id: str) -> dict[str, Any]:
        return file_object(owned_file(store, file_id, tenant))

    @router.get("/v1/files/{file_id}/content")
    def file_content(tenant: Tenant, file_id: str) -> FileResponse:
        record = owned_file(store, file_id, tenant)
        if is_s3(record.location) or not Path(record.location).exists():
            raise ApiError(404, f"the content of {file_id} is gone", "file_not_found")
        return FileResponse(record.location, media_type="application/jsonl")

    @router.delete("/v1/files/{file_id}")
    def delete_file(tenant: Tenant, file_id: str) -> dict[str, Any]:
        record = owned_file(store, file_id, tenant)
        readers = store.jobs_reading(file_id)
        if readers:
            message = f"batch {readers[0].id} still reads {file_id}; cancel it or wait for it"
            raise ApiError(409, message, "file_in_use", param="file_id")
        store.delete_file(file_id, tenant)
        if not is_s3(record.location):
            with contextlib.suppress(FileNotFoundError):
                Path(record.location).unlink()
        return {"id": file_id, "object": "file", "deleted": True}

    return router
