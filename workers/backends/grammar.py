"""Structured output in the decode loops: each constrained row has an llguidance matcher
(its grammar, ``Grammar.grammar()``), and before every token is chosen the rows' allowed
tokens are a bitmask that turns every other logit to -inf.

The masks are computed on the host (llguidance, tens of microseconds a row for JSON
Schema), all constrained rows into one int32 tensor, copied to the device once per step and
unpacked there: the step still copies to the host once (its tokens). Rows that ask for no
format cost nothing; a step with none costs nothing. A row's matcher takes each token it is
given (``advance``); when the grammar is complete and allows nothing more, the row ends
``stop``, and where it allows end-of-sequence the mask lets the model choose it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from headrace.workers.backends.base import Sampling

if TYPE_CHECKING:
    from llguidance import LLMatcher, LLTokenizer


class Constraints:
    """The matchers of one model's tokenizer. ``tokenizer``: a transformers fast tokenizer
    (its Rust tokenizer is what llguidance reads); it is wrapped at the first constrained
    row, not before (about a second for a large vocabulary)."""

    def __init__(self, tokenizer: Any, eos_id: int) -> None:
        self._tokenizer = tokenizer
        self._eos_id = eos_id
        self._wrapped: LLTokenizer | None = None
        self._lock = threading.Lock()

    def _lltokenizer(self) -> LLTokenizer:
        with self._lock:
            if self._wrapped is None:
                from llguidance.hf import from_tokenizer

                self._wrapped = from_tokenizer(self._tokenizer, eos_token=self._eos_id)
            return self._wrapped

    def matcher(self, params: Sampling) -> LLMatcher | None:
        """A fresh matcher for a row that asks for a format (None: it asks for none)."""
        fmt = getattr(params, "response_format", None)
        if fmt is None:
            return None
        from llguidance import LLMatcher

        matcher = LLMatcher(self._lltokenizer(), fmt.grammar(), log_level=0)
        if matcher.is_error():  # schemas are checked when read: this is a bug, not bad input
            raise ValueError(f"structured output: {matcher.get_error()}")
        return matcher

    def mask(self, logits: torch.Tensor, matchers: Sequence[LLMatcher | None]) -> torch.Tensor:
        """``logits`` [rows, vocab] with every token a row's grammar does not allow next at
        -inf (rows without a matcher, or whose matcher is done, as they are)."""
        rows = [k for k, m in enumerate(matchers) if m is not None and not m.is_stopped()]
        if not rows:
            return logits
        vocab = self._lltokenizer().vocab_size
        words = (vocab + 31) // 32
        bits = torch.empty((len(rows), words), dtype=torch.int32)
        for i, k in enumerate(rows):
            matcher = matchers[k]
            assert matcher is not None
            matcher.unsafe_compute_mask_ptr(bits[i].data_ptr(), words * 4)
        allowed = unpack(bits.to(logits.device, non_blocking=True), logits.shape[-1])
        at = torch.tensor(rows, device=logits.device)
        sub = logits.index_select(0, at).masked_fill(~allowed, float("-inf"))
        return logits.index_copy(0, at, sub)


def unpack(bits: torch.Tensor, vocab: int) -> torch.Tensor:
    """[rows, words] int32 bitmasks (token t is bit t % 32 of word t // 32) as a [rows,
    vocab] boolean tensor; tokens past the mask's width are not allowed."""
    shifts = torch.arange(32, dtype=torch.int32, device=bits.device)
    flat = ((bits[:, :, None] >> shifts) & 1).reshape(bits.shape[0], -1).bool()
    if flat.shape[1] >= vocab:
        return flat[:, :vocab]
    pad = torch.zeros((bits.shape[0], vocab - flat.shape[1]), dtype=torch.bool, device=bits.device)
    return torch.cat([flat, pad], dim=1)
