"""ECHO BACKEND, for benchmarks of the pipeline path only: no model runs. It tokenises like
the real model (so buckets, token counts and limits are real) and answers every input with a
4-number vector derived from its length. Chosen by ``worker_backend = "echo"``; the worker
logs a warning, and nothing it returns is an embedding."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from headrace.models.tokenizer import load_tokenizer
from headrace.workers.backends.base import EncodedItem, LoadTimings, Shape
from headrace.workers.backends.embedding import EncoderInputs

ECHO_DIM = 4


class EchoBackend(EncoderInputs):
    task = "embed"

    def __init__(self, name: str, model_dir: Path, max_tokens: int) -> None:
        self.name = name  # requests name the model; the worker's log says ECHO BACKEND
        self.max_tokens = max_tokens
        self.device = "none"
        self.timings = LoadTimings()
        self.tokenizer = load_tokenizer(model_dir)

    def load_weights(self) -> None:
        pass

    def build(self) -> None:
        pass

    def warm_up(self, shapes: Sequence[Shape]) -> None:
        start = time.perf_counter()
        items = [
            EncodedItem(ids=[1] * min(s.length, self.max_tokens), token_count=s.length)
            for s in shapes
        ]
        self.embed(items, [True] * len(items))
        self.timings.warm_up_s = time.perf_counter() - start

    def embed(
        self, items: list[EncodedItem], normalize: list[bool]
    ) -> tuple[list[list[float]], int, int]:
        longest = max(len(item.ids) for item in items)
        vectors = [[len(item.ids) / 1000.0, 0.0, 0.0, 1.0] for item in items]
        return vectors, sum(len(item.ids) for item in items), len(items) * longest
