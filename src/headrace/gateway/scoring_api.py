"""``POST /v1/rerank`` and ``POST /v1/classify`` through the pipeline.

Rerank takes the shape Cohere, Jina and vLLM serve (``query``, ``documents`` as strings or
``{"text": ...}``, ``top_n``, ``return_documents``; TEI's ``texts`` is read as
``documents``): each (query, document) pair is one pipeline request, batched by the same
token budget as any other, and the answer lists the documents by ``relevance_score``
(the model's sigmoid), best first. Classify takes ``input`` (a text or a list) as vLLM's
does, and answers each text's most likely ``label`` and every label's probability
(``probs``, in the model's label order). The model must be registered with that task
(``rerank``: a cross-encoder with one label; ``classify``: a sequence classifier)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, model_validator

from headrace.gateway.api import ApiError, KeyPriority, Tenant, api_error
from headrace.gateway.pipeline_calls import results_of
from headrace.models.registry import resolve
from headrace.producers.client import Client
from headrace.schemas.errors import HeadraceError
from headrace.schemas.results import ScoreResult

MAX_DOCUMENTS = 1000
MAX_INPUTS = 2048


class Document(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str


class RerankCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    query: str = Field(min_length=1)
    documents: list[str | Document] | None = Field(default=None, max_length=MAX_DOCUMENTS)
    texts: list[str] | None = Field(default=None, max_length=MAX_DOCUMENTS)  # TEI's name
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    truncate: bool = False  # cut a pair past the model's length instead of refusing it

    @model_validator(mode="after")
    def _documents(self) -> RerankCreate:
        if (self.documents is None) == (self.texts is None):
            raise ValueError("give documents (or TEI's texts), one of the two")
        if not self.document_texts():
            raise ValueError("documents: give at least one")
        return self

    def document_texts(self) -> list[str]:
        given = self.documents if self.documents is not None else self.texts or []
        return [d.text if isinstance(d, Document) else d for d in given]


class ClassifyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    input: str | list[str] = Field(min_length=1)
    truncate: bool = False

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


def scoring_router(client_for: Callable[[str], Client]) -> APIRouter:
    router = APIRouter()

    def client_serving(tenant: str, model: str, task: str) -> Client:
        client = client_for(tenant)
        try:
            spec = resolve(client.settings, model)
        except HeadraceError as exc:
            raise api_error(exc) from exc
        if spec.task != task:
            message = f"{model} is a {spec.task} model; /v1/{task} needs a {task} model"
            raise ApiError(400, message, "invalid_model", param="model")
        return client

    @router.post("/v1/rerank")
    async def rerank(tenant: Tenant, priority: KeyPriority, body: RerankCreate) -> dict[str, Any]:
        client = client_serving(tenant, body.model, "rerank")
        documents = body.document_texts()
        results = [
            _scored(r)
            for r in await results_of(
                client,
                [body.query] * len(documents),
                pairs=documents,
                model=body.model,
                truncate=body.truncate,
                priority=priority,
            )
        ]
        scores = [r.scores[0] for r in results]
        order = sorted(range(len(documents)), key=lambda k: -scores[k])[: body.top_n]
        return {
            "id": f"rerank-{uuid.uuid4().hex}",
            "model": body.model,
            "results": [
                {"index": k, "relevance_score": scores[k]}
                | ({"document": {"text": documents[k]}} if body.return_documents else {})
                for k in order
            ],
            "usage": {"total_tokens": sum(r.token_count for r in results)},
        }

    @router.post("/v1/classify")
    async def classify(
        tenant: Tenant, priority: KeyPriority, body: ClassifyCreate
    ) -> dict[str, Any]:
        client = client_serving(tenant, body.model, "classify")
        texts = body.texts()
        if len(texts) > MAX_INPUTS:
            raise ApiError(400, f"input: at most {MAX_INPUTS}", "invalid_value", param="input")
        results = [
            _scored(r)
            for r in await results_of(
                client, texts, model=body.model, truncate=body.truncate, priority=priority
            )
        ]
        tokens = sum(r.token_count for r in results)
        return {
            "id": f"classify-{uuid.uuid4().hex}",
            "object": "list",
            "created": int(time.time()),
            "model": body.model,
            "data": [
                {
                    "index": i,
                    "label": r.labels[max(range(len(r.scores)), key=r.scores.__getitem__)],
                    "probs": r.scores,
                    "num_classes": len(r.scores),
                }
                for i, r in enumerate(results)
            ],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    return router


def _scored(result: object) -> ScoreResult:
    assert isinstance(result, ScoreResult), result
    return result
