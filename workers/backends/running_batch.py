"""The batch a continuous decoder runs (``continuous.py``): its rows in the order they joined,
their key/value cache and their attention mask (``[rows, columns]``, each row left-padded),
kept in step as rows join and leave. No scheduling here: when rows join, step and leave is
the decoder's.

The cache is transformers' ``DynamicCache`` whose layers become ``kv_room.RoomyLayer`` (rows
and columns of room, so joining and cutting rarely copy the whole cache); a cache with
layers of another kind is refused (``check_layers``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch

Row = TypeVar("Row")


def _kv_room() -> Any:
    """The cache layer module (it imports transformers: only once a decoder runs)."""
    from headrace.workers.backends import kv_room

    return kv_room


class Unsupported(RuntimeError):
    """The model's KV cache cannot be joined and cut row by row."""


def check_layers(cache: Any) -> None:
    """Raise ``Unsupported`` unless every layer of ``cache`` is a plain ``DynamicLayer``."""
    layers = getattr(cache, "layers", None)
    if not layers or any(type(layer).__name__ != "DynamicLayer" for layer in layers):
        kinds = sorted({type(layer).__name__ for layer in layers or []})
        raise Unsupported(f"continuous batching needs DynamicLayer caches, not {kinds}")


def select(cache: Any, mask: torch.Tensor, keep: list[int]) -> torch.Tensor:
    """Keep the rows ``keep`` of a prefill's ``cache`` (in place) and of its ``mask``."""
    _kv_room().select_rows(cache, keep)
    return mask.index_select(0, torch.tensor(keep, device=mask.device))


class RunningBatch(Generic[Row]):
    """``rows[k]`` is the row whose keys and values are row ``k`` of ``cache``, and whose
    columns in use are the ones set in ``mask[k]``. ``decode`` runs a step on ``model``
    (its cache argument named ``cache_arg``, a step's mask as ``step_mask`` makes it)."""

    right_padded = False  # its prefills end every row in the last column
    cuts_free = False  # cutting rows out moves the rows below them (a copy)

    def __init__(
        self,
        model: Any = None,
        cache_arg: str = "past_key_values",
        step_mask: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> None:
        self.model, self.cache_arg = model, cache_arg
        self.step_mask = step_mask or (lambda mask: mask)
        self.rows: list[Row] = []
        self.cache: Any = None
        self.mask: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, cache: Any, mask: torch.Tensor, rows: list[Row]) -> None:
        """Rows a prefill made (``cache`` and ``mask`` of theirs) join below the others, all
        left-padded to the wider of the two."""
        if not self.rows:
            _kv_room().hold_all(cache)
            self.cache, self.mask, self.rows = cache, mask, rows
            return
        assert self.mask is not None
        width = max(self.mask.shape[1], mask.shape[1])
        _kv_room().join(self.cache, cache, width)
        self.mask = torch.cat([pad_left(self.mask, width), pad_left(mask, width)])
        self.rows += rows

    def take_prefill(
        self, cache: Any, mask: torch.Tensor, rows: list[Row], keep: list[int]
    ) -> None:
        """Rows ``keep`` of a prefill's ``rows`` (its ``cache`` and ``mask``) join."""
        if len(keep) < len(rows):
            mask = select(cache, mask, keep)
            rows = [rows[k] for k in keep]
        self.add(cache, mask, rows)

    def next_mask(self, tokens: int = 1) -> torch.Tensor:
        """The mask of a step that feeds ``tokens`` more columns to every row."""
        assert self.mask is not None
        return torch.cat([self.mask, self.mask.new_ones((len(self.rows), tokens))], dim=1)

    def stepped(self, cache: Any, mask: torch.Tensor) -> None:
        """The cache and the mask after a step (``mask`` from ``next_mask``)."""
        self.cache, self.mask = cache, mask

    def decode(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        """One step: ``tokens[k]`` at ``positions[k]`` for ``rows[k]``; the rows' logits."""
        mask = self.next_mask()
        out = self.model(
            input_ids=column(tokens, mask.device),
            attention_mask=self.step_mask(mask),
            position_ids=column(positions, mask.device),
            use_cache=True,
            **{self.cache_arg: self.cache},
        )
        self.stepped(out[self.cache_arg], mask)
        logits: torch.Tensor = out.logits[:, -1, :]
        return logits

    def keep(self, keep: list[int]) -> None:
        """Only rows ``keep`` go on (the rows below a cut one move up, in place); the leading
        columns no remaining row uses are cut off. None kept: the batch is empty."""
        if not keep:
            self.clear()
            return
        assert self.mask is not None
        _kv_room().keep_rows(self.cache, keep)
        self.mask = self.mask.index_select(0, torch.tensor(keep, device=self.mask.device))
        self.rows = [self.rows[k] for k in keep]
        used = self.mask.sum(dim=0).nonzero()
        first = int(used[0]) if len(used) else 0
        if first:  # columns every remaining row has as padding
            self.mask = self.mask[:, first:]
            _kv_room().drop_columns(self.cache, first)

    def clear(self) -> None:
        self.rows, self.cache, self.mask = [], None, None


def pad_left(mask: torch.Tensor, width: int) -> torch.Tensor:
    """``mask`` (``[rows, length]``) with zero columns before it up to ``width``."""
    missing = width - mask.shape[1]
    if missing <= 0:
        return mask
    return torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], dim=1)


def prefill_inputs(
    prompts: list[list[int]], pad_id: int, device: torch.device, right: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and attention mask (``[rows, longest]``) of ``prompts`` padded with
    ``pad_id``: on the left (every row ends in the last column), or on the ``right`` (every
    row starts in the first: the slots' cache, ``slot_cache.py``). Built on the host, then
    copied."""
    longest = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), longest), dtype=torch.long)
    for k, prompt in enumerate(prompts):
        columns = slice(0, len(prompt)) if right else slice(longest - len(prompt), longest)
        ids[k, columns] = torch.tensor(prompt)
        mask[k, columns] = 1
    return ids.to(device), mask.to(device)


def column(values: list[int], device: torch.device) -> torch.Tensor:
    """``values`` as a [n, 1] tensor (a flat list converts several times faster than a
    nested one, and this runs twice a step)."""
    return torch.tensor(values, dtype=torch.long).view(-1, 1).to(device)


def last_logits(logits: torch.Tensor, prompts: list[list[int]], right: bool) -> torch.Tensor:
    """A prefill's logits at each row's last prompt token (the last column when left-padded)."""
    if not right:
        return logits[:, -1, :]
    last = torch.tensor([len(p) - 1 for p in prompts], device=logits.device)
    return logits[torch.arange(len(prompts), device=logits.device), last]
