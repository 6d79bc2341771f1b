"""Per-bucket degradation: is a bucket able to serve, or should new requests get a fast
``unavailable`` error instead of piling up? A pure object with an injected clock.

Two reasons to degrade, each clearing by itself:

- **no workers**: a bucket that had a live worker and has had none for ``degrade_after_s``.
  Clears when one beats again. A bucket that never had one is starting (its workers load
  their model): its requests queue, within their deadlines, for up to ``cold_start_s`` from
  construction; only past that does it count as without workers (none is coming).
- **failing**: at least ``min_requests`` answered within ``window_s`` and the share of model
  errors at or above ``error_rate``. Opens for ``cooldown_s``; then the window starts empty and
  requests flow again (half-open); if they keep failing it opens again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from headrace.config.settings import default


class Health(StrEnum):
    ok = "ok"
    no_workers = "no_workers"
    failing = "failing"


@dataclass(frozen=True)
class HealthPolicy:
    degrade_after_s: float = default("degrade_after_s")
    cold_start_s: float = default("cold_start_s")
    error_rate: float = default("breaker_error_rate")
    min_requests: int = default("breaker_min_requests")
    window_s: float = default("breaker_window_s")
    cooldown_s: float = default("breaker_cooldown_s")


class BucketHealth:
    def __init__(self, policy: HealthPolicy, clock: Callable[[], float]) -> None:
        self.policy = policy
        self.clock = clock
        self._started = clock()
        self._last_live: float | None = None  # None: no live worker seen yet
        self._outcomes: deque[tuple[float, int, int]] = deque()  # (time, ok, failed)
        self._answered = 0  # the window's sums, kept as it moves
        self._failed = 0
        self._open_until: float | None = None

    def observe_workers(self, live: int) -> None:
        if live > 0:
            self._last_live = self.clock()

    def record(self, ok: int, failed: int) -> None:
        now = self.clock()
        if self._open_until is not None:
            return  # outcomes of batches sent before the breaker opened say nothing new
        self._outcomes.append((now, ok, failed))
        self._answered += ok + failed
        self._failed += failed
        self._expire(now)
        total, errors = self._answered, self._failed
        if total >= self.policy.min_requests and errors / total >= self.policy.error_rate:
            self._open_until = now + self.policy.cooldown_s
            self._outcomes.clear()
            self._answered = self._failed = 0

    def state(self) -> Health:
        now = self.clock()
        if self._open_until is not None:
            if now < self._open_until:
                return Health.failing
            self._open_until = None  # half-open: let requests through and watch again
        if self._last_live is None:
            if now - self._started >= self.policy.cold_start_s:
                return Health.no_workers
        elif now - self._last_live >= self.policy.degrade_after_s:
            return Health.no_workers
        return Health.ok

    def _expire(self, now: float) -> None:
        while self._outcomes and self._outcomes[0][0] < now - self.policy.window_s:
            _, ok, failed = self._outcomes.popleft()
            self._answered -= ok + failed
            self._failed -= failed
