"""A batch's inputs as the model takes them: texts encoded, inputs given as token ids taken
as given (those outside the model's vocabulary, or sent to a model that takes none, answered
alone), and a rerank's or classifier's pairs encoded with their segments."""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import SCORED, BatchItem, Reply
from headrace.workers.backends.base import Backend, EncodedItem, ModelBackend
from headrace.workers.reply_delivery import failure
from headrace.workers.score_rows import encode_pairs

if TYPE_CHECKING:
    from headrace.workers.backends.scoring import ScoreBackend


def given_ids_fit(
    items: list[BatchItem], backend: ModelBackend, replies: list[tuple[BatchItem, Reply]]
) -> list[BatchItem]:
    """``items`` but those whose input is token ids this backend cannot take (not an
    encoder's, or not in its vocabulary): each answered in ``replies`` with why."""
    kept = []
    for item in items:
        ids = item.request.input_ids
        if ids is None:
            kept.append(item)
            continue
        if backend.task != "embed":
            why = f"{backend.name} takes no input given as token ids"
        elif max(ids) >= (vocab := cast(Backend, backend).vocab_size):
            why = f"token id {max(ids)} is not in the model's vocabulary (0..{vocab - 1})"
        else:
            kept.append(item)
            continue
        replies.append((item, failure(item, ErrorInfo(code=ErrorCode.invalid_schema, message=why))))
    return kept


def encode(backend: ModelBackend, items: list[BatchItem], prompts: list[str]) -> list[EncodedItem]:
    """Each item's input encoded: its text (``prompts``), or its token ids as given."""
    truncate = [i.request.params.truncate for i in items]
    if backend.task in SCORED:
        return encode_pairs(cast("ScoreBackend", backend), items, prompts, truncate)
    encoded = backend.encode(prompts, truncate)
    given = [k for k, i in enumerate(items) if i.request.input_ids is not None]
    if given:
        rows = [list(items[k].request.input_ids or []) for k in given]
        as_given = cast(Backend, backend).encode_ids(rows, [truncate[k] for k in given])
        for k, enc in zip(given, as_given, strict=True):
            encoded[k] = enc
    return encoded
