"""What the layers of a slots' decode step see (``slot_cache.py``): which slots and columns."""

from __future__ import annotations

import torch

SMALLEST = 8  # the smallest bucket, rows and columns


class Window:
    """What the layers of a step see: ``rows`` slots and ``columns`` columns (Python ints
    fixed for a bucket), the slots' indexes and positions (device tensors)."""

    def __init__(self, slots: int, device: torch.device) -> None:
        self.index = torch.arange(slots, device=device)
        self.positions = torch.zeros((slots, 1), dtype=torch.long, device=device)
        self.rows = slots
        self.columns = SMALLEST
