"""A layer of the slots' key/value cache (``slot_cache.py``): transformers' cache layer
contract over buffers allocated once. Imported only once a decoder runs (it imports
transformers)."""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

from headrace.workers.backends.slot_window import Window


class SlotLayer(DynamicLayer):  # type: ignore[no-untyped-call]
    """One layer's keys and values, ``[slots, heads, width, dim]``: a step writes each row's
    new column at its position and attends over the window's columns."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, window: Window) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.is_initialized = True
        self.device = keys.device
        self._keys, self._values, self._window = keys, values, window
        self.keys, self.values = keys, values

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        w = self._window
        rows = key_states.shape[0]
        index, columns = w.index[:rows], w.positions[:rows, 0]
        self._keys[index, :, columns] = key_states[:, :, -1]
        self._values[index, :, columns] = value_states[:, :, -1]
        self.keys = self._keys[:rows, :, : w.columns]
        self.values = self._values[:rows, :, : w.columns]
        return self.keys, self.values

    def fill(self, slots: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> None:
        """A prefill's rows (``[rows, heads, length, dim]``, right-padded) into ``slots``."""
        length = keys.shape[2]
        self._keys[slots, :, :length] = keys
        self._values[slots, :, :length] = values
