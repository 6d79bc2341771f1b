"""The custom_id of each input line, on disk: ``custom_ids.jsonl`` holds one JSON string per
line and ``custom_ids.idx`` its byte offset (8 bytes per line), so the collector finds any
line's custom_id with two reads and no memory that grows with the file."""

from __future__ import annotations

import json
import struct
from pathlib import Path

ENTRY = struct.Struct("<Q")


class CustomIds:
    def __init__(self, folder: Path, create: bool = False) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        mode = "w+b" if create else "r+b"
        self._data = open(folder / "custom_ids.jsonl", mode)  # noqa: SIM115 - closed in close()
        self._index = open(folder / "custom_ids.idx", mode)  # noqa: SIM115
        self._next = 1

    def add(self, line: int, custom_id: str) -> None:
        """Lines are added in order, from 1."""
        if line != self._next:
            raise ValueError(f"line {line} added after line {self._next - 1}")
        self._index.write(ENTRY.pack(self._data.tell()))
        self._data.write(json.dumps(custom_id).encode() + b"\n")
        self._next += 1

    def get(self, line: int) -> str:
        self._index.seek((line - 1) * ENTRY.size)
        packed = self._index.read(ENTRY.size)
        if len(packed) != ENTRY.size:
            raise KeyError(line)
        (offset,) = ENTRY.unpack(packed)
        self._data.seek(offset)
        value = json.loads(self._data.readline())
        assert isinstance(value, str)
        return value

    def close(self) -> None:
        self._data.close()
        self._index.close()
