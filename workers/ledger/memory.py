"""The ledger in process memory, for unit tests of batch and dispatch rules without Redis:
the same behaviour as ``RedisLedger`` (tests/workers/ledger/test_contract.py runs both),
with expiry on an injected clock. One lock makes each call atomic, as a Lua script is."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from headrace.schemas.messages import Completion
from headrace.workers.ledger.base import (
    ANSWERED,
    BEATS_KEPT_S,
    SENDING_PREFIX,
    WORKER_INFO_TTL_S,
    ClaimState,
    Key,
    Ledger,
    ReplyAt,
)


class Expiring:
    """Values that vanish at their deadline (None: never), like keys with a TTL."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.values: dict[Any, tuple[Any, float | None]] = {}

    def get(self, key: Any) -> Any:
        found = self.values.get(key)
        if found is None:
            return None
        value, deadline = found
        if deadline is not None and self.clock() >= deadline:
            del self.values[key]
            return None
        return value

    def set(self, key: Any, value: Any, ttl_s: float | None = None) -> None:
        self.values[key] = (value, None if ttl_s is None else self.clock() + ttl_s)

    def delete(self, key: Any) -> None:
        self.values.pop(key, None)


class MemoryLedger(Ledger):
    def __init__(self, answered_ttl_s: int = 3600, clock: Callable[[], float] = time.time) -> None:
        self.answered_ttl_s = answered_ttl_s
        self.clock = clock
        self.lock = threading.Lock()
        self._empty()

    def _empty(self) -> None:
        clock = self.clock
        self.claims = Expiring(clock)  # (tenant, request_id) -> owner | sending:owner | answered
        self.at = Expiring(clock)  # (tenant, request_id) -> ReplyAt
        self.cancels = Expiring(clock)  # (tenant, request_id) -> True
        self.info = Expiring(clock)  # worker_id -> its self-description
        self.running: dict[str, str] = {}  # batch_id -> worker_id
        self.completions: dict[str, list[Completion]] = {}
        self.beats: dict[int, dict[str, float]] = {}  # bucket -> worker_id -> last beat
        self.epoch_value: str | None = None

    def wipe(self) -> None:
        """What a store that lost its data looks like."""
        with self.lock:
            self._empty()

    def claim(
        self, ids: list[Key], owner: str, lease_ms: int, worker_id: str | None = None
    ) -> list[ClaimState]:
        with self.lock:
            if worker_id is not None:
                self.running[owner] = worker_id
            out = []
            for key in ids:
                held = self.claims.get(key)
                if held == ANSWERED:
                    out.append(ClaimState.answered)
                elif held is not None and held != owner:
                    out.append(ClaimState.busy)
                else:
                    self.claims.set(key, owner, max(1, lease_ms) / 1000)
                    cancelled = self.cancels.get(key) is not None
                    out.append(ClaimState.cancelled if cancelled else ClaimState.fresh)
            return out

    def begin_send(self, ids: list[Key], owner: str, ttl_ms: int) -> list[bool]:
        with self.lock:
            for key in ids:
                if self.claims.get(key) == owner:
                    self.claims.set(key, SENDING_PREFIX + owner, ttl_ms / 1000)
            return [self.cancels.get(key) is not None for key in ids]

    def holders(self, ids: list[Key]) -> list[str | None]:
        with self.lock:
            return [self.claims.get(key) for key in ids]

    def mark_answered(self, ids: list[Key], where: Mapping[Key, ReplyAt] | None = None) -> None:
        with self.lock:
            self._mark(ids, where or {})

    def _mark(self, ids: list[Key], where: Mapping[Key, ReplyAt]) -> None:
        for key in ids:
            self.claims.set(key, ANSWERED, self.answered_ttl_s)
            if key in where:
                self.at.set(key, where[key], self.answered_ttl_s)

    def replies_at(self, ids: list[Key]) -> list[ReplyAt | None]:
        with self.lock:
            return [self.at.get(key) for key in ids]

    def take_if(self, ids: list[Key], expected: list[str], owner: str, lease_ms: int) -> list[bool]:
        with self.lock:
            out = []
            for key, value in zip(ids, expected, strict=True):
                taken = self.claims.get(key) == value
                if taken:
                    self.claims.set(key, owner, max(1, lease_ms) / 1000)
                out.append(taken)
            return out

    def release(self, ids: list[Key], owner: str) -> int:
        with self.lock:
            mine = [k for k in ids if self.claims.get(k) in (owner, SENDING_PREFIX + owner)]
            for key in mine:
                self.claims.delete(key)
            return len(mine)

    def finish(
        self,
        ids: list[Key],
        dispatcher_id: str,
        completion: Completion,
        where: Mapping[Key, ReplyAt] | None,
        *,
        last: bool,
    ) -> None:
        with self.lock:
            self._mark(ids, where or {})
            self.completions.setdefault(dispatcher_id, []).append(completion)
            if last:
                self.running.pop(completion.batch_id, None)

    def cancel(self, tenant: str, request_id: str) -> None:
        with self.lock:
            self.cancels.set((tenant, request_id), True, self.answered_ttl_s)

    def cancelled(self, ids: list[Key]) -> list[bool]:
        with self.lock:
            return [self.cancels.get(key) is not None for key in ids]

    def end_batch(self, batch_id: str) -> None:
        with self.lock:
            self.running.pop(batch_id, None)

    def runners(self, batch_ids: list[str]) -> list[str | None]:
        with self.lock:
            return [self.running.get(b) for b in batch_ids]

    def epoch(self, candidate: str) -> str:
        with self.lock:
            if self.epoch_value is None:
                self.epoch_value = candidate
            return self.epoch_value

    def take_completions(self, dispatcher_id: str, limit: int = 1000) -> list[Completion]:
        with self.lock:
            queued = self.completions.get(dispatcher_id, [])
            taken, self.completions[dispatcher_id] = queued[:limit], queued[limit:]
            return taken

    def heartbeat(
        self, worker_id: str, buckets: list[int], info: Mapping[str, object] | None = None
    ) -> None:
        with self.lock:
            now = self.clock()
            for bucket in buckets:
                beats = self.beats.setdefault(bucket, {})
                beats[worker_id] = now
                for old in [w for w, t in beats.items() if t < now - BEATS_KEPT_S]:
                    del beats[old]
            if info is not None:
                self.info.set(worker_id, dict(info), WORKER_INFO_TTL_S)

    def worker_info(self, worker_ids: list[str]) -> dict[str, dict[str, Any]]:
        with self.lock:
            found = {w: self.info.get(w) for w in worker_ids}
            return {w: v for w, v in found.items() if v is not None}

    def retire(self, worker_id: str, buckets: list[int]) -> None:
        with self.lock:
            for bucket in buckets:
                self.beats.get(bucket, {}).pop(worker_id, None)
            self.info.delete(worker_id)

    def live_workers(self, buckets: list[int], within_s: float) -> dict[int, set[str]]:
        with self.lock:
            since = self.clock() - within_s
            return {b: {w for w, t in self.beats.get(b, {}).items() if t >= since} for b in buckets}
