"""A model folder's safetensors weights, read from their headers alone (8-byte little-endian
length, then JSON): each tensor's dtype and element count. Nothing is loaded."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str  # safetensors' spelling: F32, F16, BF16, I64, ...
    count: int  # elements


def tensors(folder: Path) -> Iterator[TensorInfo]:
    """Every tensor of every ``*.safetensors`` file under ``folder``."""
    for path in sorted(folder.rglob("*.safetensors")):
        with open(path, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, tensor in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for dim in tensor["shape"]:
                count *= int(dim)
            yield TensorInfo(name, tensor["dtype"], count)
