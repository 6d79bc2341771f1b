"""A key/value cache of fixed row slots, for the continuous decoder on a GPU: a decode step
whose shapes and memory repeat, so it can be replayed as a CUDA graph (``decode_graphs.py``).

Each running row owns a slot, a row of per-layer buffers ``[slots, heads, width, dim]``
allocated once (``width``: the model's context). A row's prompt sits in columns
``[0, prompt)`` of its slot and every step writes the row's next column at its own position,
so rows joining and leaving never move another row (the left-padded cache of ``kv_room.py``
copies rows when they join wider or leave, and grows its buffers when room runs out). A step
runs on a **bucket**: the slots up to the highest one in use and the columns up to the
longest row, each rounded up to a power of two; its tokens and positions are written into
buffers the step reads, and its mask is made from the positions on the device. So a step
of a bucket is the same kernels on the same memory every time, with no value read back to
the host (``tests/workers/backends/test_slot_cache.py`` checks both on CPU).

Slots above the running rows inside a bucket decode padding at position 0 (their own column
0, attending only to it, so every value stays finite); their outputs are not read.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import torch

from headrace.workers.backends.decode_jobs import LiveRow
from headrace.workers.backends.slot_window import SMALLEST, Window


def bucket(n: int, most: int) -> int:
    """``n`` rounded up to a power of two (at least ``SMALLEST``), at most ``most``."""
    size = SMALLEST
    while size < n:
        size *= 2
    return min(size, most)


Runner = Callable[[int, int, Callable[[], torch.Tensor]], torch.Tensor]

# a row's logits as a step and its sampling hold them, in bytes per vocabulary entry beyond
# the model's own element size twice (the slots' one buffer, the head's output in the
# graphs' pool): the sampler's float32 probabilities, their sorted copy, its int64 order,
# the cumulative sum and the scattered result (top-p), all [rows, vocabulary]
SAMPLING_BYTES = 4 + 4 + 8 + 4 + 4


def slots_fitting(free_bytes: int, token_bytes: int, width: int, vocab: int, element: int) -> int:
    """How many slots 90% of ``free_bytes`` holds: each a row's keys and values at every
    column (``token_bytes`` x ``width``) and its logits' working memory."""
    per_slot = token_bytes * width + vocab * (2 * element + SAMPLING_BYTES)
    return int(free_bytes * 0.9) // per_slot


def eager(rows: int, columns: int, step: Callable[[], torch.Tensor]) -> torch.Tensor:
    """Run a bucket's step as it is (``decode_graphs.StepGraphs`` replays it instead)."""
    return step()


class SlotBatch:
    """The continuous decoder's running rows on slots: ``rows[k]`` decodes in slot
    ``slots[k]``. At most ``capacity`` slots of ``width`` columns (fewer where the KV room
    says so: ``limit``); ``runner(rows, columns, step)`` runs a bucket's step (eagerly, or as
    a CUDA graph)."""

    right_padded = True  # its prefills put every row's prompt at column 0
    cuts_free = True  # a row leaving frees its slot: nothing moves

    def __init__(
        self,
        model: Any,
        cache_arg: str,
        pad_id: int,
        device: torch.device,
        capacity: int,
        width: int,
        runner: Runner = eager,
        token_bytes: int = 0,
    ) -> None:
        self.model, self.cache_arg, self.pad_id, self.device = model, cache_arg, pad_id, device
        self.capacity, self.width, self.runner = capacity, width, runner
        self.token_bytes = token_bytes
        self.rows: list[LiveRow] = []
        self.slots: list[int] = []
        self._free = list(range(capacity))  # a heap: the lowest slot first keeps buckets small
        self.cache: Any = None  # the model's cache with SlotLayer layers, once a row joined
        self._window = Window(capacity, device)
        self._ids = torch.full((capacity, 1), pad_id, dtype=torch.long, device=device)
        self._columns = torch.arange(width, device=device)
        # the steps' logits, one buffer for every bucket (a recorded step's own output would
        # be a [rows, vocabulary] tensor kept for each graph: ~26 MB at 256 rows of GPT-2's)
        self._logits: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def free(self) -> int:
        return len(self._free)

    def limit(self, kv_tokens: int | None) -> None:
        """Before the buffers are allocated: no more slots than ``kv_tokens`` (the memory
        plan's KV room) holds at ``width`` columns each, nor, on a GPU, than 90% of its free
        memory holds (``slots_fitting``; ``token_bytes``: a token's keys and values, every
        layer); one at least."""
        if self.cache is not None:
            return
        capacity = self.capacity
        if kv_tokens is not None:
            capacity = min(capacity, kv_tokens // self.width)
        if self.device.type == "cuda" and self.token_bytes:
            free, _ = torch.cuda.mem_get_info(self.device)
            head = self.model.get_output_embeddings().weight  # [vocabulary, hidden]
            fit = slots_fitting(
                free, self.token_bytes, self.width, head.shape[0], head.element_size()
            )
            capacity = min(capacity, fit)
        self._resize(max(1, capacity))

    def _resize(self, capacity: int) -> None:
        """Fewer slots, before any row holds one."""
        if capacity != self.capacity:
            self.capacity = capacity
            self._free = list(range(capacity))
            self._window = Window(capacity, self.device)
            self._ids = self._ids[:capacity]

    def take_prefill(
        self, cache: Any, mask: torch.Tensor, rows: list[LiveRow], keep: list[int]
    ) -> None:
        """Rows ``keep`` of a right-padded prefill's ``rows`` join (its ``mask`` is not
        needed: a slot's mask is made from its row's position)."""
        self.add(cache, [rows[k] for k in keep], keep)

    def add(self, cache: Any, rows: list[LiveRow], keep: list[int]) -> None:
        """Rows ``keep`` of a right-padded prefill's ``cache`` join as ``rows`` (their
        prompts in columns ``[0, position)`` of a free slot each)."""
        if len(rows) > len(self._free):
            raise RuntimeError(f"{len(rows)} rows joining, {len(self._free)} slots free")
        slots = [heapq.heappop(self._free) for _ in rows]
        prefilled = list(cache.layers)  # the first prefill's cache becomes the slots' one
        if self.cache is None:
            self._allocate(cache)
        taken = torch.tensor(slots, device=self.device)
        chosen = torch.tensor(keep, device=self.device)
        for mine, theirs in zip(self.cache.layers, prefilled, strict=True):
            mine.fill(
                taken, theirs.keys.index_select(0, chosen), theirs.values.index_select(0, chosen)
            )
        self.rows += rows
        self.slots += slots

    def _allocate(self, cache: Any) -> None:
        """The slots' buffers, shaped after a prefill's ``cache`` (zeros: every column a
        step may attend to holds a finite number), and the cache the steps hand the model."""
        from headrace.workers.backends.slot_layer import SlotLayer  # imports transformers

        for i, layer in enumerate(cache.layers):
            _, heads, _, dim = layer.keys.shape
            shape = (self.capacity, heads, self.width, dim)
            keys = layer.keys.new_zeros(shape)
            cache.layers[i] = SlotLayer(keys, torch.zeros_like(keys), self._window)
        self.cache = cache
        head = self.model.get_output_embeddings().weight  # [vocabulary, hidden]
        self._logits = head.new_empty((self.capacity, head.shape[0]))

    def keep(self, keep: list[int]) -> None:
        """Only rows ``keep`` go on; the others' slots are free (nothing moves)."""
        kept = set(keep)
        freed = [slot for k, slot in enumerate(self.slots) if k not in kept]
        self.rows = [self.rows[k] for k in keep]
        self.slots = [self.slots[k] for k in keep]
        for slot in freed:
            heapq.heappush(self._free, slot)
        if freed:  # an empty slot decodes padding at position 0 (finite, never read)
            index = torch.tensor(freed, device=self.device)
            self._window.positions.index_fill_(0, index, 0)
            self._ids.index_fill_(0, index, self.pad_id)

    def clear(self) -> None:
        self.keep([])

    def decode(self, tokens: list[int], positions: list[int]) -> torch.Tensor:
        """One step: ``tokens[k]`` at ``positions[k]`` for ``rows[k]``; the logits of the
        rows, in their order."""
        rows = bucket(max(self.slots) + 1, self.capacity)
        columns = bucket(max(positions) + 1, self.width)
        given = torch.tensor([self.slots, tokens, positions], dtype=torch.long).to(self.device)
        slots = given[0]
        self._ids.index_copy_(0, slots, given[1, :, None])
        self._window.positions.index_copy_(0, slots, given[2, :, None])
        logits = self.runner(rows, columns, lambda: self.step(rows, columns))
        return logits.index_select(0, slots)

    def step(self, rows: int, columns: int) -> torch.Tensor:
        """A bucket's forward pass over the buffers: what a CUDA graph records. Its shapes
        and its Python values depend on ``rows`` and ``columns`` alone; its logits are
        written into the slots' one logits buffer."""
        w = self._window
        w.rows, w.columns = rows, columns
        positions = w.positions[:rows]
        mask = (self._columns[None, :columns] <= positions)[:, None, None, :]
        out = self.model(
            input_ids=self._ids[:rows],
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self.cache_arg: self.cache},
        )
        assert self._logits is not None  # allocated with the slots
        self._logits[:rows].copy_(out.logits[:, -1, :])
        return self._logits[:rows]
