"""Every row's next token in one pass on the model's device, and one copy to the host.

A decode step used to pick each row's token on its own (``argmax().item()`` or
``multinomial().item()``): one device-to-host wait per row per step, 4,161 of them in a
64-row generation on an H200, where the GPU then sat idle while Python asked for the next
row. Here greedy rows take one batched argmax; sampled rows are drawn together with the
exponential race (the token maximising ``p / E``, with ``E`` exponential noise, is a draw
from ``p``): temperature, top-p and the noise are tensors over the sampled rows. The noise
is a counter-based hash of (the row's seed, its step, the token): a few kernels for every
row at once (a seeded generator per row took a launch per row per step, a tenth of a
256-row step's CPU time on an H200), and a row draws the same tokens whatever its
batch-mates, in static or continuous batching. The step's tokens reach the host with one
``tolist()``.

Before the choice, rows that ask for them get OpenAI's ``logit_bias``, ``presence_penalty``
and ``frequency_penalty`` (``adjust``): the counts of the tokens each row generated so far
are built on the device from its history (one host-to-device copy, no wait for the host),
only for those rows; rows that ask for none cost nothing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from headrace.workers.backends.base import Logprob, Sampling

# splitmix64's constants, as signed 64-bit integers (torch has no unsigned 64-bit type;
# its integer arithmetic wraps like the unsigned one)
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15
_MIX1 = -4658895280553007687  # 0xBF58476D1CE4E5B9
_MIX2 = -7723592293110705685  # 0x94D049BB133111EB


def new_seed() -> int:
    """A seed for a row that asked for none."""
    return random.getrandbits(62)


def _shift(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 values (``>>`` is arithmetic on signed tensors)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def noise(
    seeds: Sequence[int], steps: Sequence[int], vocab: int, device: torch.device
) -> torch.Tensor:
    """[rows, vocab] exponential noise, a pure function of (seed, step, token): splitmix64
    over the three, its top 24 bits as a uniform in (0, 1), then ``-log``."""
    seed = torch.tensor(seeds, dtype=torch.int64, device=device)[:, None]
    step = torch.tensor(steps, dtype=torch.int64, device=device)[:, None]
    token = torch.arange(vocab, dtype=torch.int64, device=device)[None, :]
    x = seed * _GOLDEN + (step + 1) * _MIX2 + token * _MIX1
    x = (x ^ _shift(x, 30)) * _MIX1
    x = (x ^ _shift(x, 27)) * _MIX2
    x = x ^ _shift(x, 31)
    uniform = (_shift(x, 40).float() + 0.5) / float(1 << 24)
    return -torch.log(uniform)


def adjust(
    logits: torch.Tensor, params: Sequence[Sampling], histories: Sequence[Sequence[int]]
) -> torch.Tensor:
    """``logits`` with each asking row's ``logit_bias`` added and its penalties taken off
    (``histories[k]``: the tokens row k generated so far); the same tensor where no row asks.
    A biased token id the model has not is left out (the SDK refuses it before sending)."""
    asking = [
        k for k, p in enumerate(params) if p.logit_bias or p.presence_penalty or p.frequency_penalty
    ]
    if not asking:
        return logits
    device, vocab = logits.device, logits.shape[-1]
    rows = torch.tensor(asking, device=device)
    sub = logits.index_select(0, rows).float()
    penalized = [
        i for i, k in enumerate(asking) if params[k].presence_penalty or params[k].frequency_penalty
    ]
    if penalized:
        longest = max(1, *(len(histories[asking[i]]) for i in penalized))
        padded = [
            list(histories[asking[i]]) + [vocab] * (longest - len(histories[asking[i]]))
            for i in penalized
        ]
        ids = torch.tensor(padded, dtype=torch.int64, device=device)
        counts = torch.zeros(len(penalized), vocab + 1, device=device)
        counts.scatter_add_(1, ids, torch.ones_like(ids, dtype=counts.dtype))
        counts = counts[:, :vocab]
        which = torch.tensor(penalized, device=device)
        freq = torch.tensor([params[asking[i]].frequency_penalty for i in penalized], device=device)
        pres = torch.tensor([params[asking[i]].presence_penalty for i in penalized], device=device)
        taken = counts * freq[:, None] + (counts > 0).float() * pres[:, None]
        sub.index_add_(0, which, -taken)
    pairs = [
        (i, token, bias)
        for i, k in enumerate(asking)
        for token, bias in params[k].logit_bias
        if 0 <= token < vocab
    ]
    if pairs:
        at_row = torch.tensor([i for i, _, _ in pairs], device=device)
        at_token = torch.tensor([t for _, t, _ in pairs], device=device)
        biases = torch.tensor([b for _, _, b in pairs], device=device)
        sub.index_put_((at_row, at_token), biases, accumulate=True)
    return logits.index_copy(0, rows, sub.to(logits.dtype))


def choose_tokens(
    logits: torch.Tensor,
    params: Sequence[Sampling],
    seeds: Sequence[int],
    steps: Sequence[int],
    histories: Sequence[Sequence[int]] | None = None,
) -> torch.Tensor:
    """``logits`` [rows, vocab] -> the chosen token of every row, [rows], on their device
    (no host wait): argmax where ``temperature`` is 0, else a draw at that temperature from
    the smallest set of tokens reaching ``top_p``, from noise of (``seeds[k]``,
    ``steps[k]``); first ``adjust`` for the rows that ask (``histories``: each row's
    generated tokens, needed for the penalties)."""
    logits = adjust(logits, params, histories if histories is not None else [()] * len(params))
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
    race = noise([seeds[k] for k in sampled], [steps[k] for k in sampled], probs.shape[1], device)
    picks = (probs / race).argmax(dim=-1)
    return chosen.index_copy(0, rows, picks)


@dataclass
class Chosen:
    """A step's choice: the tokens on the device (the next step's input), the same on the
    host, and the log probabilities of the rows that asked (row -> its token's)."""

    ids: torch.Tensor
    tokens: list[int]
    logprobs: dict[int, Logprob]


def choose_step(
    raw: torch.Tensor,
    logits: torch.Tensor,
    params: Sequence[Sampling],
    seeds: Sequence[int],
    steps: Sequence[int],
    histories: Sequence[Sequence[int]],
    asking: Sequence[int] = (),
) -> Chosen:
    """``choose_tokens`` on ``logits`` (``raw``, the model's, once masked by a grammar), and
    for the rows in ``asking`` their token's log probability under ``raw`` with their
    ``logprobs`` most likely alternatives; everything reaches the host in one copy (ids and
    log probabilities packed into one float64 tensor: every token id is exact in it)."""
    chosen = choose_tokens(logits, params, seeds, steps, histories)
    if not asking:
        return Chosen(chosen, chosen.tolist(), {})
    at = torch.tensor(list(asking), device=raw.device)
    log_p = torch.log_softmax(raw.index_select(0, at).float(), dim=-1)
    picked = log_p.gather(1, chosen.index_select(0, at)[:, None]).flatten()
    k = max(params[i].logprobs or 0 for i in asking)
    parts = [chosen.double(), picked.double()]
    if k:
        top_values, top_ids = log_p.topk(k, dim=-1)
        parts += [top_values.flatten().double(), top_ids.flatten().double()]
    values = torch.cat(parts).tolist()
    rows, count = len(params), len(asking)
    tokens = [int(v) for v in values[:rows]]
    logprobs: dict[int, Logprob] = {}
    for j, row in enumerate(asking):
        own = params[row].logprobs or 0
        base = rows + count
        top = tuple(
            (int(values[base + count * k + j * k + t]), values[base + j * k + t])
            for t in range(own)
        )
        logprobs[row] = Logprob(tokens[row], values[rows + j], top)
    return Chosen(chosen, tokens, logprobs)
