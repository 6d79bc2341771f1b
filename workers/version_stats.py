"""What each model version did, per second, in Redis: requests answered, model errors, and
a latency histogram (the dispatcher reading the request to its reply being acknowledged).
Workers add their batches' outcomes; the canary judge and ``headrace models status`` read a
window of it (``VersionWindow``). Each second's hash lives ten minutes."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import cast

import redis

from headrace.models.canary import VersionWindow

# histogram upper edges, ms: x1.25 from 1 ms to about 9 minutes (the last bucket is open)
EDGES_MS: tuple[float, ...] = tuple(1.25**i for i in range(60))
KEEP_S = 600


def quantile_ms(counts: Sequence[int], q: float) -> float | None:
    """The upper edge of the bucket holding the ``q`` quantile."""
    total = sum(counts)
    if not total:
        return None
    seen = 0
    for i, n in enumerate(counts):
        seen += n
        if seen >= q * total:
            return EDGES_MS[min(i, len(EDGES_MS) - 1)]
    return EDGES_MS[-1]


class VersionStats:
    def __init__(self, client: redis.Redis, prefix: str, model: str) -> None:
        self.redis = client
        self.prefix = f"{prefix}:vstats:{model}"

    def _key(self, version: str, second: int) -> str:
        return f"{self.prefix}:{version}:{second}"

    def add(self, version: str, now: float, outcomes: Iterable[tuple[bool, float]]) -> None:
        """``outcomes``: (answered without a model error, latency ms) per reply."""
        key = self._key(version, int(now))
        pipe = self.redis.pipeline(transaction=False)
        for ok, latency_ms in outcomes:
            pipe.hincrby(key, "ok" if ok else "err", 1)
            pipe.hincrby(key, f"l{bisect.bisect_left(EDGES_MS, latency_ms)}", 1)
        pipe.expire(key, KEEP_S)
        pipe.execute()

    def window(self, version: str, now: float, window_s: float) -> VersionWindow:
        last = int(now)
        seconds = range(last - max(1, int(window_s)) + 1, last + 1)
        pipe = self.redis.pipeline(transaction=False)
        for second in seconds:
            pipe.hgetall(self._key(version, second))
        ok = err = 0
        counts = [0] * (len(EDGES_MS) + 1)
        for part in cast(list[dict[bytes, bytes]], pipe.execute()):
            for field, value in part.items():
                name, n = field.decode(), int(value)
                if name == "ok":
                    ok += n
                elif name == "err":
                    err += n
                else:
                    counts[min(int(name[1:]), len(counts) - 1)] += n
        return VersionWindow(
            requests=ok + err,
            errors=err,
            p99_ms=quantile_ms(counts, 0.99),
            p50_ms=quantile_ms(counts, 0.5),
        )
