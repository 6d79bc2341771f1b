"""A sequence classifier on the batch path: a cross-encoder's relevance of (query,
document) pairs (``rerank``: one logit, its sigmoid in 0..1) or a classifier's label
probabilities (``classify``: the softmax of its logits), for a batch of texts or pairs at
once. Loaded, placed and warmed as an encoder is (``EmbeddingBackend``); a pair is encoded
with its segments (``token_type_ids``) as the model was trained, and cut longest-first past
the model's length where asked."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from headrace.models.manifest import labels_of
from headrace.models.tokenizer import load_tokenizer
from headrace.workers.backends.base import EncodedItem
from headrace.workers.backends.embedding import EmbeddingBackend, padded_batch


class ScoreBackend(EmbeddingBackend):
    """``task``: ``rerank`` or ``classify`` (the model's manifest says which)."""

    def __init__(
        self, name: str, model_dir: Path, max_tokens: int, task: str, device: str = "auto"
    ) -> None:
        super().__init__(name, model_dir, max_tokens, device=device)
        if task not in ("rerank", "classify"):
            raise ValueError(f"task {task!r}: rerank or classify")
        self.task = task
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
        self.labels = ["score"] if task == "rerank" else labels_of(config)
        self._cutting = load_tokenizer(model_dir)
        self._cutting.enable_truncation(max_tokens, strategy="longest_first")

    @staticmethod
    def _load(folder: str) -> Any:
        from transformers import AutoModelForSequenceClassification

        return AutoModelForSequenceClassification.from_pretrained(folder)

    def encode_pairs(
        self, texts: list[str], pairs: list[str | None], truncate: list[bool]
    ) -> list[EncodedItem]:
        """Each text with its pair (None: the text alone), special tokens and segments as
        the tokenizer puts them; past ``max_tokens``, cut longest-first where asked, else
        marked too long."""
        inputs: list[Any] = [t if p is None else (t, p) for t, p in zip(texts, pairs, strict=True)]
        items = []
        for k, encoding in enumerate(self.tokenizer.encode_batch(inputs)):
            if len(encoding.ids) <= self.max_tokens:
                items.append(_item(encoding))
            elif truncate[k]:
                items.append(_item(self._cutting.encode(texts[k], pairs[k]), truncated=True))
            else:
                items.append(EncodedItem(ids=[], token_count=len(encoding.ids), too_long=True))
        return items

    def score(self, items: list[EncodedItem]) -> tuple[npt.NDArray[np.float32], int, int]:
        """[rows, labels] scores (rerank: one column), the batch's real and padded tokens."""
        if any(item.too_long for item in items):
            raise ValueError("too_long items cannot be scored")
        ids, mask, real = padded_batch(items, self.pad_id)
        segments = itertools.chain.from_iterable(
            item.type_ids if item.type_ids is not None else [0] * len(item.ids) for item in items
        )
        flat = np.fromiter(segments, dtype=np.int64, count=real)
        held = np.zeros(tuple(ids.shape), dtype=np.int64)
        held[mask.numpy().astype(bool)] = flat  # as padded_batch lays out the ids
        types = torch.from_numpy(held)
        with self.pulse.forward():
            scores = self._scores(
                self._to_device(ids), self._to_device(mask), self._to_device(types)
            )
            out: npt.NDArray[np.float32] = scores.float().cpu().numpy()
        return out, real, ids.numel()

    def _scores(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            logits = self._model(input_ids=ids, attention_mask=mask, token_type_ids=types).logits
            if self.task == "rerank":
                return torch.sigmoid(logits[:, :1].float())
            return torch.softmax(logits.float(), dim=-1)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, normalize: bool) -> torch.Tensor:
        """The warm-up's pass (a batch of single texts)."""
        return self._scores(ids, mask, torch.zeros_like(ids))


def _item(encoding: Any, truncated: bool = False) -> EncodedItem:
    ids = list(encoding.ids)
    types = list(encoding.type_ids)
    return EncodedItem(
        ids=ids, token_count=len(ids), truncated=truncated, type_ids=types if any(types) else None
    )
