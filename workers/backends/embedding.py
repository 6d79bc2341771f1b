"""Sentence embeddings with a BERT-style encoder: mean pooling over the attention mask,
optionally L2-normalised (all-MiniLM-L6-v2's recipe)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from tokenizers import Tokenizer

from headrace.models.tokenizer import load_tokenizer, special_frame
from headrace.workers.backends.base import (
    EncodedItem,
    LoadTimings,
    Shape,
    cuda_memory,
    place_on_device,
    warm_each,
)
from headrace.workers.backends.chunking import skip_chunking_checks
from headrace.workers.backends.pulse import Pulse


def pick_device(preference: str) -> torch.device:
    if preference == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(preference)


def encode_texts(
    tokenizer: Tokenizer, max_tokens: int, texts: list[str], truncate: list[bool]
) -> list[EncodedItem]:
    """Token ids per text; past ``max_tokens`` cut (keeping the closing [SEP]) where asked,
    else marked too long."""
    encoded = tokenizer.encode_batch(texts)
    return [fit(e.ids, max_tokens, cut, 1) for e, cut in zip(encoded, truncate, strict=True)]


def encode_ids(
    tokenizer: Tokenizer, max_tokens: int, rows: list[list[int]], truncate: list[bool]
) -> list[EncodedItem]:
    """Inputs given as token ids, as given, between the special tokens the tokenizer puts
    around a text's (``special_frame``); cut or marked too long as texts are."""
    lead, trail = special_frame(tokenizer)
    return [
        fit(lead + row + trail, max_tokens, cut, len(trail))
        for row, cut in zip(rows, truncate, strict=True)
    ]


def fit(ids: list[int], max_tokens: int, cut: bool, closing: int) -> EncodedItem:
    """``ids`` as one input: past ``max_tokens``, cut (keeping the ``closing`` special
    tokens, BERT's [SEP]) where asked, else marked too long."""
    if len(ids) <= max_tokens:
        return EncodedItem(ids=ids, token_count=len(ids))
    if cut:
        end = ids[len(ids) - closing :] if closing else []
        kept = ids[: max_tokens - closing] + end
        return EncodedItem(ids=kept, token_count=len(kept), truncated=True)
    return EncodedItem(ids=[], token_count=len(ids), too_long=True)


def padded_batch(
    items: Sequence[EncodedItem], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The batch's ids right-padded to its longest row and their attention mask, built in
    one shot (no per-row tensor: a 200-row batch made ~2,000 small torch calls), and its
    real tokens."""
    lengths = np.fromiter((len(item.ids) for item in items), dtype=np.int64, count=len(items))
    flat = np.fromiter(
        itertools.chain.from_iterable(item.ids for item in items),
        dtype=np.int64,
        count=int(lengths.sum()),
    )
    mask = np.arange(int(lengths.max()))[None, :] < lengths[:, None]
    ids = np.full(mask.shape, pad_id, dtype=np.int64)
    ids[mask] = flat  # row by row, left to right: each row's ids, then its padding
    return torch.from_numpy(ids), torch.from_numpy(mask.astype(np.int64)), len(flat)


class EncoderInputs:
    """An encoder's inputs: texts, or token ids as given, with ``self.tokenizer`` and cut
    at ``self.max_tokens``."""

    tokenizer: Tokenizer
    max_tokens: int

    def encode(self, texts: list[str], truncate: list[bool]) -> list[EncodedItem]:
        return encode_texts(self.tokenizer, self.max_tokens, texts, truncate)

    def encode_ids(self, rows: list[list[int]], truncate: list[bool]) -> list[EncodedItem]:
        return encode_ids(self.tokenizer, self.max_tokens, rows, truncate)

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size())


class EmbeddingBackend(EncoderInputs):
    """``pooling``: ``mean`` over the attention mask (sentence-transformers' recipe for
    MiniLM) or ``cls`` (the first token's state, e.g. BGE); ``normalize``: whether this model
    L2-normalises at all (a request asking for no normalising is never normalised)."""

    task = "embed"

    def __init__(
        self,
        name: str,
        model_dir: Path,
        max_tokens: int,
        device: str = "auto",
        pooling: str = "mean",
        normalize: bool = True,
    ) -> None:
        if pooling not in ("mean", "cls"):
            raise ValueError(f"pooling {pooling!r}: mean or cls")
        self.name = name
        self.pooling = pooling
        self.normalizes = normalize
        self.model_dir = model_dir
        self.max_tokens = max_tokens
        self.device = pick_device(device)
        self.timings = LoadTimings()
        self.tokenizer = load_tokenizer(model_dir)
        self.pad_id = self.tokenizer.token_to_id("[PAD]") or 0
        self._model: Any = None
        self._weights_bytes = 0
        self.pulse = Pulse()  # a forward pass is a step (``workers.stall_watch``)

    # --- loading, in three timed stages -------------------------------------------------
    def load_weights(self) -> None:
        start = time.perf_counter()
        self._model = self._load(str(self.model_dir))
        self.timings.load_weights_s = time.perf_counter() - start

    @staticmethod
    def _load(folder: str) -> Any:
        from transformers import AutoModel

        return AutoModel.from_pretrained(folder)

    def build(self) -> None:
        start = time.perf_counter()
        self._model, self._weights_bytes = place_on_device(self._model, self.device)
        skip_chunking_checks()  # its modules are loaded now: no signature check a layer
        self.timings.build_s = time.perf_counter() - start

    def warm_up(self, shapes: Sequence[Shape]) -> None:
        """Each warm-up batch (rows x length, shaped like production); output must be
        finite."""
        start = time.perf_counter()

        def run(shape: Shape) -> None:
            length = min(shape.length, self.max_tokens)
            ids = torch.full((shape.rows, length), 1000, dtype=torch.long, device=self.device)
            mask = torch.ones_like(ids)
            vectors = self._forward(ids, mask, normalize=True)
            if not torch.isfinite(vectors).all():
                raise RuntimeError(f"warm-up at {length} tokens produced non-finite output")

        kind, peaks = warm_each(self.device, shapes, run)
        self.timings.memory_kind, self.timings.peak_bytes_per_bucket = kind, peaks
        if self.device.type == "cuda":
            largest = max(shapes, key=lambda s: s.tokens)
            self.timings.memory = cuda_memory(
                self.device, self._weights_bytes, largest.tokens, max(peaks.values())
            )
        self.timings.warm_up_s = time.perf_counter() - start

    # --- the batch path -----------------------------------------------------------------

    def embed(
        self, items: list[EncodedItem], normalize: list[bool]
    ) -> tuple[npt.NDArray[np.float32], int, int]:
        if any(item.too_long for item in items):
            raise ValueError("too_long items cannot be embedded")
        ids, mask, real = padded_batch(items, self.pad_id)
        with self.pulse.forward():  # to the host copy: there a hung kernel shows
            pooled = self._forward(self._to_device(ids), self._to_device(mask), normalize=False)
            normalize = [n and self.normalizes for n in normalize]
            if any(normalize):
                flags = torch.tensor(normalize, device=pooled.device).unsqueeze(1)
                pooled = torch.where(flags, torch.nn.functional.normalize(pooled, dim=1), pooled)
            # one copy to the host, kept as one float32 array (no float objects per value)
            vectors: npt.NDArray[np.float32] = pooled.float().cpu().numpy()
        return vectors, real, ids.numel()

    def _to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        """On CUDA through pinned memory, without waiting for the copy."""
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _forward(self, ids: torch.Tensor, mask: torch.Tensor, normalize: bool) -> torch.Tensor:
        with torch.inference_mode():
            hidden = self._model(input_ids=ids, attention_mask=mask).last_hidden_state
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            if normalize:
                pooled = torch.nn.functional.normalize(pooled, dim=1)
            result: torch.Tensor = pooled
            return result
