"""MiniLM loaded on the CPU, for tests that run the real model in this process."""

from __future__ import annotations

from headrace.models.registry import model_spec
from headrace.workers.backends import EmbeddingBackend
from headrace.workers.backends.base import default_shapes

MINILM = "all-MiniLM-L6-v2"


def loaded_minilm(warm_up: list[int] | None = None) -> EmbeddingBackend:
    spec = model_spec(MINILM)
    backend = EmbeddingBackend(spec.name, spec.path, spec.max_tokens, device="cpu")
    backend.load_weights()
    backend.build()
    if warm_up:
        backend.warm_up(default_shapes(warm_up))
    return backend
