"""Rerank and classify rows of a batch: each text with its pair encoded as the model was
trained on pairs, one forward pass, and a ``ScoreResult`` per row."""

from __future__ import annotations

from typing import TYPE_CHECKING

from headrace.schemas.messages import BatchItem
from headrace.schemas.results import Result, ScoreResult
from headrace.workers.backends.base import EncodedItem

if TYPE_CHECKING:
    from headrace.workers.backends.scoring import ScoreBackend


def encode_pairs(
    backend: ScoreBackend, items: list[BatchItem], texts: list[str], truncate: list[bool]
) -> list[EncodedItem]:
    return backend.encode_pairs(texts, [i.request.input_pair for i in items], truncate)


def score_rows(
    backend: ScoreBackend, runnable: list[tuple[BatchItem, EncodedItem]]
) -> tuple[list[Result], int, int]:
    """The rows' scores (the model's labels with them), and the batch's real and padded
    tokens."""
    scores, real, padded = backend.score([enc for _, enc in runnable])
    results: list[Result] = [
        ScoreResult(
            scores=[float(s) for s in scores[k]],
            labels=list(backend.labels),
            token_count=enc.token_count,
            truncated=enc.truncated,
        )
        for k, (_, enc) in enumerate(runnable)
    ]
    return results, real, padded
