"""``GET /v1/models`` and ``/v1/models/{id}``: what this gateway's pipeline serves, in
OpenAI's object shape, with headrace's own fields beside (version, task, max tokens)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from headrace.config.settings import Settings
from headrace.jobs.api import ApiError, Tenant
from headrace.models.registry import model_spec, served_models


def model_object(name: str) -> dict[str, Any]:
    spec = model_spec(name)
    return {
        "id": spec.name,
        "object": "model",
        "created": int(spec.path.stat().st_mtime),  # when its weights were put here
        "owned_by": "headrace",
        "version": spec.version,
        "task": spec.task,
        "max_tokens": spec.max_tokens,
    }


def models_router(settings: Settings) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/models")
    def list_models(tenant: Tenant) -> dict[str, Any]:
        return {"object": "list", "data": [model_object(n) for n in served_models(settings)]}

    @router.get("/v1/models/{model_id:path}")
    def get_model(tenant: Tenant, model_id: str) -> dict[str, Any]:
        if model_id not in served_models(settings):
            raise ApiError(404, f"no model {model_id!r} here", "model_not_found", param="model")
        return model_object(model_id)

    return router
