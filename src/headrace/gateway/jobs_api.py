"""``/v1/jobs``: single asynchronous jobs. One request (an embedding, a completion or a chat
completion), submitted now by a runner pool (``jobs/pool.py``), collected later with
``GET /v1/jobs/{id}`` or by a signed webhook on completion."""

from __future__ import annotations

import json
import uuid
from typing import Any

from fastapi import APIRouter
from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field

from headrace.config.settings import Settings
from headrace.gateway.api import ApiError, Tenant
from headrace.gateway.batches_api import owned_job
from headrace.gateway.caps import check_open_jobs
from headrace.gateway.config import GatewayConfig
from headrace.jobs.formats import Invalid, parse_line
from headrace.jobs.launch import new_job
from headrace.jobs.single import KIND, job_object
from headrace.jobs.single_runner import CUSTOM_ID
from headrace.jobs.store import JobStore
from headrace.jobs.webhooks import WebhookRefused, check_target, secret_of
from headrace.schemas.openai_batch import EMBEDDINGS_URL

# which field names the request: its endpoint
URL_OF = {"input": EMBEDDINGS_URL, "prompt": "/v1/completions", "messages": "/v1/chat/completions"}


class JobCreate(BaseModel):
    """The body of the endpoint it names (``input``: embeddings, ``prompt``: a completion,
    ``messages``: a chat completion, with that endpoint's parameters), and the job's own
    ``webhook_url`` and ``metadata``."""

    model_config = ConfigDict(extra="allow")

    model: str = "all-MiniLM-L6-v2"
    input: str | None = Field(default=None, min_length=1)
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    webhook_url: AnyHttpUrl | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)

    def request_line(self) -> tuple[str, dict[str, Any]]:
        """(endpoint, body) of the one request."""
        given = [name for name in URL_OF if getattr(self, name) is not None]
        if len(given) != 1:
            raise ApiError(
                400, "give exactly one of input, prompt or messages", "invalid_value", param="input"
            )
        body = self.model_dump(exclude={"webhook_url", "metadata"}, exclude_none=True)
        return URL_OF[given[0]], body


def jobs_router(settings: Settings, config: GatewayConfig, store: JobStore) -> APIRouter:
    """``settings``: handed on to the job machinery (webhooks, ``new_job``)."""
    router = APIRouter()
    files_dir = config.files_dir

    @router.post("/v1/jobs")
    def create_job(tenant: Tenant, body: JobCreate) -> dict[str, Any]:
        url, request = body.request_line()
        line = json.dumps({"custom_id": CUSTOM_ID, "method": "POST", "url": url, "body": request})
        parsed = parse_line(line, 1, "openai", url)
        if isinstance(parsed, Invalid):
            raise ApiError(400, parsed.reason, "invalid_value")
        check_open_jobs(store, config.tenant_max_open_jobs, tenant)
        metadata: dict[str, str] = dict(body.metadata or {})
        if body.webhook_url is not None:
            try:
                secret_of(tenant, settings)
                check_target(str(body.webhook_url), settings)
            except WebhookRefused as exc:
                raise ApiError(403, str(exc), "webhook_not_allowed", param="webhook_url") from exc
            metadata["webhook_url"] = str(body.webhook_url)
        files_dir.mkdir(parents=True, exist_ok=True)
        source = files_dir / f"job-{uuid.uuid4().hex}.jsonl"
        source.write_text(line + "\n", encoding="utf-8")
        job = new_job(
            store,
            settings,
            str(source),
            tenant=tenant,
            model=body.model,
            metadata=metadata,
            kind=KIND,
            endpoint=url,
        )
        return job_object(store.get(job.id))  # a runner pool submits it within job_poll_s

    @router.get("/v1/jobs/{job_id}")
    def get_job(tenant: Tenant, job_id: str) -> dict[str, Any]:
        return job_object(owned_job(store, job_id, tenant, kind=KIND))

    return router
