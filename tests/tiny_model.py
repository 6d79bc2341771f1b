"""The TEST MODEL (headrace-test-lm) loaded in the test process, on CPU."""

from __future__ import annotations

from headrace.models import tiny_lm
from headrace.models.registry import model_spec
from headrace.workers.backends.generation import GenerationBackend


def load_test_lm(continuous_rows: int | None = None) -> GenerationBackend:
    """``continuous_rows``: rows of every caller share one decode loop (None: static)."""
    spec = model_spec(tiny_lm.NAME)
    backend = GenerationBackend(
        spec.name, spec.path, spec.max_tokens, device="cpu", continuous_rows=continuous_rows
    )
    backend.load_weights()
    backend.build()
    return backend
