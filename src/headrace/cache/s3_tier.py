"""L3: one S3 object per entry, zstd-compressed JSON, under ``<topic prefix>/`` in the cache
bucket. An unreachable S3 raises S3Unavailable; the tiered cache skips L3 and counts it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from headrace.cache.entry import CacheEntry
from headrace.connections import ZstdObjects


class S3Tier:
    def __init__(self, client: Any, bucket: str, prefix: str, level: int = 3) -> None:
        self.objects = ZstdObjects(client, bucket, level)
        self.prefix = prefix

    def object_key(self, key: str) -> str:
        return f"{self.prefix}/{key[:2]}/{key}.json.zst"

    def get(self, key: str) -> CacheEntry | None:
        raw = self.objects.get(self.object_key(key))
        return None if raw is None else CacheEntry.from_bytes(raw)

    def put(self, entry: CacheEntry) -> int:
        """Store ``entry``; returns its compressed size."""
        return self.objects.put(self.object_key(entry.key), entry.to_bytes())

    def delete(self, keys: Iterable[str]) -> None:
        self.objects.delete(self.object_key(k) for k in keys)

    def usage(self) -> tuple[int, int]:
        """(objects, bytes) under this prefix."""
        return self.objects.usage(f"{self.prefix}/")
