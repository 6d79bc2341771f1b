"""Every row's next token in one pass on the model's device, and one copy to the host.

A decode step used to pick each row's token on its own (``argmax().item()`` or
``multinomial().item()``): one device-to-host wait per row per step, 4,161 of them in a
64-row generation on an H200, where the GPU then sat idle while Python asked for the next
row. Here greedy rows take one batched argmax; sampled rows are drawn together with the
exponential race (the token maximising ``p / E``, with ``E`` exponential noise, is a draw
from ``p``): temperature, top-p and the noise are tensors over the sampled rows, the noise of
each row from its own seeded generator, so a row draws the same tokens whatever its
batch-mates. The step's tokens reach the host with one ``tolist()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from headrace.workers.backends.base import Sampling


def choose_tokens(
    logits: torch.Tensor, params: Sequence[Sampling], generators: Sequence[Any]
) -> torch.Tensor:
    """``logits`` [rows, vocab] -> the chosen token of every row, [rows], on their device
    (no host wait): argmax where ``temperature`` is 0, else a draw at that temperature from
    the smallest set of tokens reaching ``top_p``."""
    chosen = logits.argmax(dim=-1)
    sampled = [k for k, p in enumerate(params) if p.temperature > 0.0]
    if not sampled:
        return chosen
    device = logits.device
    rows = torch.tensor(sampled, device=device)
    temps = torch.tensor([params[k].temperature for k in sampled], device=device)
    probs = torch.softmax(logits.index_select(0, rows).float() / temps[:, None], dim=-1)
    top_p = [params[k].top_p for k in sampled]
    if min(top_p) < 1.0:
        cut = torch.tensor(top_p, device=device)[:, None]
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_probs = sorted_probs.masked_fill(before >= cut, 0.0)
        probs = torch.zeros_like(probs).scatter_(1, order, sorted_probs)
    noise = torch.empty_like(probs)
    for j, k in enumerate(sampled):
        noise[j].exponential_(generator=generators[k])
    noise.clamp_(min=1e-30)  # never 0: 0/0 would be NaN, which argmax takes as the largest
    picks = (probs / noise).argmax(dim=-1)
    return chosen.index_copy(0, rows, picks)
