"""Decode-step attention that skips the padding columns a group of rows does not use.

The continuous decoder keeps every running row in one left-padded KV cache, as wide as its
longest row. A short row that joined while a 256-token row ran attends over all those
columns, masked: on CPU the kernel still does the work (a step of 100 rows at a cache 300
wide spent half its time in attention). Rows sit in the cache in the order they joined, so
neighbours have similar lengths: this attention splits a decode step's rows into chunks of
``CHUNK_ROWS`` and runs transformers' own SDPA attention on each chunk over only the columns
from the first one any of its rows uses. Masked columns contribute nothing, so the result is
the same attention, up to floating point.

Anything but a single-token decode step with a boolean mask (a prefill, no mask, a position
bias) goes to SDPA unchanged. ``use_for(model)`` switches a model on SDPA over to it.
"""

from __future__ import annotations

from typing import Any

import torch

NAME = "headrace_ragged_sdpa"
CHUNK_ROWS = 32

Chunk = tuple[int, int, int]  # rows [start, end), from this key column on


def chunks(first_used: list[int], size: int) -> list[Chunk]:
    """Rows in runs of ``size``, each with the first column any of its rows uses."""
    return [
        (a, min(a + size, len(first_used)), min(first_used[a : a + size]))
        for a in range(0, len(first_used), size)
    ]


_last: tuple[torch.Tensor, int, list[Chunk]] | None = None  # the last step's mask and plan


def _plan(attention_mask: torch.Tensor) -> list[Chunk]:
    """The chunks of a decode step's mask. Every layer of a forward pass gets the same mask
    tensor: the plan is worked out once per step, not once per layer."""
    global _last
    if _last is not None and _last[0] is attention_mask and _last[1] == CHUNK_ROWS:
        return _last[2]
    # the first column each row attends to (argmax finds the first True)
    first_used = attention_mask[:, 0, -1, :].to(torch.uint8).argmax(-1).tolist()
    plan = chunks(first_used, CHUNK_ROWS)
    _last = (attention_mask, CHUNK_ROWS, plan)
    return plan


def ragged_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``query`` [rows, heads, q, dim], ``key``
    and ``value`` [rows, kv heads, columns, dim], a mask [rows, 1, q, columns] (True:
    attend); returns [rows, q, heads, dim]."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    rows = query.shape[0]
    if (
        query.shape[2] != 1
        or attention_mask is None
        or attention_mask.dtype != torch.bool
        or attention_mask.shape[0] != rows
        or rows <= CHUNK_ROWS
        or kwargs.get("position_bias") is not None
    ):
        out, _ = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return out, None
    parts = [
        sdpa_attention_forward(
            module,
            query[a:b],
            key[a:b, :, start:],
            value[a:b, :, start:],
            attention_mask[a:b, :, :, start:],
            **kwargs,
        )[0]
        for a, b, start in _plan(attention_mask)
    ]
    return torch.cat(parts), None


def step_mask(mask: torch.Tensor) -> torch.Tensor:
    """A decode step's [rows, columns] 0/1 mask as the prepared mask SDPA takes ([rows, 1, 1,
    columns], True: attend). transformers uses a 4D mask as it is; from a 2D one it builds
    this at every step (4% of a step on CPU)."""
    return mask.bool()[:, None, None, :]


def use_for(model: Any) -> bool:
    """Register the attention with transformers and switch ``model`` to it if it runs on
    SDPA (another choice, such as eager or a flash kernel, is left as it is)."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    if getattr(model.config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(NAME, ragged_sdpa)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    model.set_attn_implementation(NAME)
    return True
