"""``POST /v1/embeddings`` as OpenAI serves it, through the pipeline.

``input``: a string, a list of strings, a list of token ids or a list of such lists (ids of
the model's own tokenizer, checked against its vocabulary and embedded as given, never
decoded and tokenized again; ``usage`` counts what the model saw, its special tokens too).
``encoding_format``: ``float``, or ``base64``
(little-endian float32, as the official SDKs decode it; they ask for it by default).
``dimensions``: only the model's own size (an encoder not trained to be cut is not cut).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, cast

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from headrace.gateway.api import ApiError, KeyPriority, Tenant, api_error
from headrace.gateway.pipeline_calls import results_of
from headrace.models.registry import embedding_size, resolve
from headrace.models.tokenizer import tokenizer_of
from headrace.producers.client import Client
from headrace.schemas.errors import HeadraceError
from headrace.schemas.messages import EmbeddingResult
from headrace.schemas.openai_batch import EMBEDDINGS_URL

MAX_INPUTS = 2048

TokenIds = list[int]


class EmbeddingsCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a field OpenAI does not have: 400

    model: str
    input: str | list[str] | list[TokenIds] | TokenIds
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


def _inputs(body: EmbeddingsCreate) -> list[str | TokenIds]:
    """The texts or token-id rows (checked against the model's vocabulary where they are
    sent: ``Client.prepare``)."""
    raw = body.input
    if isinstance(raw, str):
        return [raw]
    if not raw:
        raise ApiError(400, "input: give at least one text", "invalid_value", param="input")
    if len(raw) > MAX_INPUTS:
        raise ApiError(400, f"input: at most {MAX_INPUTS} inputs", "invalid_value", param="input")
    first = raw[0]
    if isinstance(first, str):
        return [t for t in raw if isinstance(t, str)]
    rows = [cast(TokenIds, raw)] if isinstance(first, int) else cast(list[TokenIds], raw)
    return list(rows)


def embeddings_router(client_for: Callable[[str], Client]) -> APIRouter:
    router = APIRouter()

    @router.post(EMBEDDINGS_URL)
    async def embeddings(
        tenant: Tenant, priority: KeyPriority, body: EmbeddingsCreate
    ) -> dict[str, Any]:
        client = client_for(tenant)
        try:
            spec = resolve(client.settings, body.model)
            tokenizer_of(spec, client.settings)  # a remote version's config and tokenizer
        except HeadraceError as exc:
            raise api_error(exc) from exc
        if spec.task != "embed":
            message = f"{body.model} is a {spec.task} model; it gives no embeddings"
            raise ApiError(400, message, "invalid_model", param="model")
        size = embedding_size(spec)
        if body.dimensions is not None and body.dimensions != size:
            message = (
                f"{body.model} gives {size}-dimensional embeddings and cannot be cut to "
                f"{body.dimensions}; omit dimensions or pass {size}"
            )
            raise ApiError(400, message, "invalid_value", param="dimensions")
        texts = _inputs(body)
        results = await results_of(
            client, texts, model=body.model, vector_encoding="base64", priority=priority
        )
        data, tokens = [], 0
        for i, result in enumerate(results):
            assert isinstance(result, EmbeddingResult)
            tokens += result.token_count
            encoded = result.as_base64() if body.encoding_format == "base64" else result.vector()
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        return {
            "object": "list",
            "data": data,
            "model": body.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return router
