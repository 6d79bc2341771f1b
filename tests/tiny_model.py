"""The TEST MODEL (headrace-test-lm) loaded in the test process, on CPU."""

from __future__ import annotations

from runtime import tiny_lm
from runtime.models import model_spec
from workers.backends.generation import GenerationBackend


def load_test_lm() -> GenerationBackend:
    spec = model_spec(tiny_lm.NAME)
    backend = GenerationBackend(spec.name, spec.path, spec.max_tokens, device="cpu")
    backend.load_weights()
    backend.build()
    return backend
