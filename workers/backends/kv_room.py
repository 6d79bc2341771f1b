"""A key/value cache layer with spare rows and columns, for the continuous decode loop.

transformers' ``DynamicLayer`` appends a step's keys and values with ``torch.cat``: every
decode step copies the whole cache. For a running batch of 180 rows at 300 columns of the
test model that copy was most of the step (13.1 ms against 8.6 ms without it, one thread).
``RoomyLayer`` keeps its keys and values as views into larger buffers, and changes what the
views cover instead of copying where it can:

- a step writes its column into the room after the last one (``update``); only when the room
  runs out are the buffers copied, with half as much room again;
- rows joining, no wider than the running batch, are written into the spare rows (``join``);
- rows leaving make the rows below them move up (``keep_rows``): the copy is of the rows
  moved, usually the young ones at the bottom, not of the cache (cutting by a copy of
  everything took a quarter of the engine's time under load). The rows stay in the order
  they joined, oldest and widest first, which the chunked attention counts on
  (``ragged_attention.py``);
- leading columns no row uses any more are dropped by moving the views' start
  (``drop_columns``).

The buffers are not zero-filled: only the padding columns before each row's keys are zeroed
(masked, but a masked column must still hold a finite number); room is written before the
views cover it.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

ROOM = 64  # spare columns at least
ROW_ROOM = 16  # spare rows at least (half as many again as the rows held)


class RoomyLayer(DynamicLayer):  # type: ignore[no-untyped-call]
    """``keys``/``values``: ``[rows, heads, length, dim]`` views of larger buffers, from
    column ``start`` of them."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.is_initialized = True
        self.device = keys.device
        self.hold(keys, values)

    def hold(self, keys: torch.Tensor, values: torch.Tensor, room: int = ROOM) -> None:
        """Take ``keys`` and ``values`` (copied) with ``room`` spare columns after them."""
        rows, _, length, _ = keys.shape
        self.take(stacked([keys], length, room), stacked([values], length, room), length, rows)

    def take(
        self, keys: torch.Tensor, values: torch.Tensor, length: int, rows: int, start: int = 0
    ) -> None:
        """Use buffers ``keys`` and ``values`` (from ``stacked``) as they are: their first
        ``rows`` rows and the ``length`` columns from ``start`` hold the cache."""
        self._keys, self._values, self._start = keys, values, start
        self.keys = keys[:rows, :, start : start + length]
        self.values = values[:rows, :, start : start + length]

    @property
    def rows(self) -> int:
        return _held(self)[0].shape[0]

    @property
    def length(self) -> int:
        return _held(self)[0].shape[2]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        rows, length, new = self.rows, self.length, key_states.shape[-2]
        if self._start + length + new > self._keys.shape[-2]:
            self.hold(*_held(self), max(ROOM, length // 2) + new)
        end = self._start + length
        self._keys[:rows, :, end : end + new] = key_states
        self._values[:rows, :, end : end + new] = value_states
        self.take(self._keys, self._values, length + new, rows, self._start)
        return _held(self)

    def add_rows(self, keys: torch.Tensor, values: torch.Tensor) -> bool:
        """Write the rows of ``keys``/``values`` (no wider than this layer's length) below
        those held, right-aligned, into the spare rows; False if they do not fit."""
        held, length = self.rows, self.length
        new, _, width, _ = keys.shape
        if held + new > self._keys.shape[0] or width > length:
            return False
        columns = slice(self._start, self._start + length)
        for buffer, part in ((self._keys, keys), (self._values, values)):
            place(buffer[held : held + new, :, columns], part, length)
        self.take(self._keys, self._values, length, held + new, self._start)
        return True

    def move_rows(self, sources: torch.Tensor, at: int, rows: int) -> None:
        """Copy rows ``sources`` (each at or below where it goes) to the rows from ``at``
        on, then hold the first ``rows``."""
        if len(sources):
            for view in _held(self):
                view[at : at + len(sources)] = view.index_select(0, sources)
        self.take(self._keys, self._values, self.length, rows, self._start)

    def drop_columns(self, count: int) -> None:
        """Forget the first ``count`` columns (no copy)."""
        self.take(self._keys, self._values, self.length - count, self.rows, self._start + count)


def stacked(parts: list[torch.Tensor], width: int, room: int = ROOM) -> torch.Tensor:
    """``parts`` (``[rows, heads, length, dim]`` each, length at most ``width``) one above
    the other, each right-aligned to ``width`` columns (zeros before), with ``room`` spare
    columns after and spare rows below (neither initialised): one copy."""
    rows = sum(p.shape[0] for p in parts)
    _, heads, _, dim = parts[0].shape
    out = parts[0].new_empty((rows + max(ROW_ROOM, rows // 2), heads, width + room, dim))
    at = 0
    for part in parts:
        place(out[at : at + part.shape[0]], part, width)
        at += part.shape[0]
    return out


def place(rows: torch.Tensor, part: torch.Tensor, width: int) -> None:
    """Write ``part`` into ``rows`` of a buffer, right-aligned to ``width`` columns, with
    zeros in the columns before it."""
    length = part.shape[2]
    rows[:, :, : width - length].zero_()
    rows[:, :, width - length : width] = part


def select_rows(cache: Any, rows: list[int]) -> None:
    """Keep only ``rows`` of every layer of a plain (just prefilled) ``cache``, in order."""
    index = torch.tensor(rows, device=cache.layers[0].keys.device)
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, index)
        layer.values = layer.values.index_select(0, index)


def hold_all(cache: Any) -> None:
    """Make every layer of ``cache`` a ``RoomyLayer`` holding what it holds (copied)."""
    for i, layer in enumerate(cache.layers):
        if isinstance(layer, RoomyLayer):
            layer.hold(*_held(layer))
        else:
            cache.layers[i] = RoomyLayer(layer.keys, layer.values)


def join(running: Any, joining: Any, width: int) -> None:
    """Add the rows of cache ``joining`` below those of ``running`` (whose layers are
    ``RoomyLayer``), both right-aligned to ``width`` columns: into the spare rows where the
    running batch is that wide already and they fit, else one copy of both per layer."""
    for mine, theirs in zip(running.layers, joining.layers, strict=True):
        if width == mine.length and mine.add_rows(theirs.keys, theirs.values):
            continue
        keys = stacked([mine.keys, theirs.keys], width)
        values = stacked([mine.values, theirs.values], width)
        mine.take(keys, values, width, mine.rows + theirs.keys.shape[0])


def keep_rows(cache: Any, keep: list[int]) -> None:
    """Keep rows ``keep`` (ascending) of every layer of ``cache`` (``RoomyLayer``), in their
    order: the rows from the first one left out on move up (rows usually leave near the
    bottom, where the young short ones are, so few move)."""
    count = len(keep)
    first = next((i for i, row in enumerate(keep) if row != i), count)
    sources = torch.tensor(keep[first:], device=cache.layers[0].keys.device)
    for layer in cache.layers:
        layer.move_rows(sources, first, count)


def drop_columns(cache: Any, count: int) -> None:
    """Forget the first ``count`` columns of every layer of ``cache`` (no copy)."""
    for layer in cache.layers:
        layer.drop_columns(count)


def _held(layer: RoomyLayer) -> tuple[torch.Tensor, torch.Tensor]:
    assert layer.keys is not None and layer.values is not None
    return layer.keys, layer.values
