"""``GET /v1/models`` and ``/v1/models/{id}``: what this gateway's pipeline serves, in
OpenAI's object shape, with headrace's own fields beside (version, task, max tokens)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from headrace.config.settings import Settings
from headrace.gateway.api import ApiError, Tenant
from headrace.models.registry import resolve, served_models


def model_object(settings: Settings, name: str) -> dict[str, Any]:
    spec = resolve(settings, name)
    return {
        "id": spec.name,
        "object": "model",
        # when its stable version was registered (a built-in: when pip put its weights here)
        "created": int(
            spec.manifest.created_at.timestamp()
            if spec.manifest is not None
            else spec.path.stat().st_mtime
        ),
        "owned_by": "headrace",
        "version": spec.version,
        "task": spec.task,
        "max_tokens": spec.max_tokens,
    }


def models_router(settings: Settings) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/models")
    def list_models(tenant: Tenant) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [model_object(settings, n) for n in served_models(settings)],
        }

    @router.get("/v1/models/{model_id:path}")
    def get_model(tenant: Tenant, model_id: str) -> dict[str, Any]:
        if model_id not in served_models(settings):
            raise ApiError(404, f"no model {model_id!r} here", "model_not_found", param="model")
        return model_object(settings, model_id)

    return router
