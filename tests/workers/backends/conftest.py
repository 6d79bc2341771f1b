"""The test LM as both decoders load it: static batching, and a continuous loop (closed at
the end of the module that asked for it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from headrace.workers.backends.generation import GenerationBackend
from tests.tiny_model import load_test_lm


@pytest.fixture(scope="module")
def decoders() -> Iterator[dict[str, GenerationBackend]]:
    static = load_test_lm()
    continuous = load_test_lm(continuous_rows=64)
    yield {"static": static, "continuous": continuous}
    continuous.close()
