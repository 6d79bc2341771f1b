"""The lengths of recent requests per bucket, kept in Redis for warm-up (a worker warms up
at the lengths its buckets see). The dispatchers add the padded-token length of every row
they batch (a generation row: its prompt plus the tokens it may generate), summed in memory
and written once a second; one hash per bucket per hour, kept two days; a worker reads the
last ``hours``."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import cast

import redis

HOUR_S = 3600
KEEP_S = 2 * 24 * HOUR_S


class LengthHistogram:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix
        self._unsaved: dict[int, Counter[int]] = {}

    def _key(self, bucket: int, hour: int) -> str:
        return f"{self.prefix}:lengths:b{bucket}:{hour}"

    def add(self, bucket: int, lengths: Iterable[int]) -> None:
        """Count ``lengths`` (in memory until ``save``)."""
        self._unsaved.setdefault(bucket, Counter()).update(lengths)

    def save(self, now: float | None = None) -> None:
        """Write what was counted since the last save (kept for the next one if Redis is
        away)."""
        if not self._unsaved:
            return
        hour = int((now if now is not None else time.time()) // HOUR_S)
        pipe = self.redis.pipeline(transaction=False)
        for bucket, counts in self._unsaved.items():
            key = self._key(bucket, hour)
            for length, n in counts.items():
                pipe.hincrby(key, str(length), n)
            pipe.expire(key, KEEP_S)
        pipe.execute()
        self._unsaved.clear()

    def recent(
        self, buckets: Sequence[int], hours: int = 24, now: float | None = None
    ) -> dict[int, Mapping[int, int]]:
        """Per bucket, length -> count over the last ``hours``."""
        hour = int((now if now is not None else time.time()) // HOUR_S)
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            for h in range(hour - hours + 1, hour + 1):
                pipe.hgetall(self._key(bucket, h))
        raw = cast(list[dict[bytes, bytes]], pipe.execute())
        out: dict[int, Mapping[int, int]] = {}
        for i, bucket in enumerate(buckets):
            merged: Counter[int] = Counter()
            for part in raw[i * hours : (i + 1) * hours]:
                merged.update({int(k): int(v) for k, v in part.items()})
            out[bucket] = dict(merged)
        return out
