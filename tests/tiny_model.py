"""The TEST MODEL (headrace-test-lm) loaded in the test process, on CPU."""

from __future__ import annotations

from pathlib import Path

from headrace.models import tiny_lm
from headrace.models.registry import model_spec
from headrace.workers.backends.generation import GenerationBackend

# The served test model's weights are drawn at GPT-2's spread (0.02): its next token hardly
# depends on the tokens before the last, so a row decoded with another row's KV cache still
# gives its own tokens. At this spread it does not (test_continuous checks that it would).
CONTEXT_SPREAD = 0.3


def context_lm(root: Path) -> Path:
    """Build (once under ``root``) the test model drawn at ``CONTEXT_SPREAD``; its folder."""
    target = root / "context-lm"
    if not (target / "HEADRACE_TEST_MODEL.json").exists():
        tiny_lm.build(target, initializer_range=CONTEXT_SPREAD)
    return target


def load_test_lm(
    continuous_rows: int | None = None, model_dir: Path | None = None, slots: bool = False
) -> GenerationBackend:
    """``continuous_rows``: rows of every caller share one decode loop (None: static).
    ``model_dir``: another build of the test model (``context_lm``) instead of the served one.
    ``slots``: that loop keeps its rows on fixed slots (a GPU's layout), eagerly."""
    spec = model_spec(tiny_lm.NAME)
    backend = GenerationBackend(
        spec.name,
        model_dir or spec.path,
        spec.max_tokens,
        device="cpu",
        continuous_rows=continuous_rows,
        slots=slots,
    )
    backend.load_weights()
    backend.build()
    return backend
