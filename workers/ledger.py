"""Redis state shared by dispatcher and workers: who answered which request, completion
notices back to the dispatcher, and worker heartbeats. Key names live here only."""

from __future__ import annotations

import time
from dataclasses import dataclass
from enum import StrEnum
from typing import cast

import redis

from schemas.messages import Completion

ANSWERED = "answered"

# For each key: answered -> "answered"; claimed by another owner -> "busy";
# otherwise claim it for ARGV[1] for ARGV[2] ms -> "fresh".
_CLAIM = """
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v == 'answered' then
    out[i] = 'answered'
  elseif v and v ~= ARGV[1] then
    out[i] = 'busy'
  else
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    out[i] = 'fresh'
  end
end
return out
"""


class ClaimState(StrEnum):
    fresh = "fresh"
    answered = "answered"
    busy = "busy"


@dataclass(frozen=True)
class Keys:
    prefix: str

    def request(self, tenant: str, request_id: str) -> str:
        return f"{self.prefix}:req:{tenant}:{request_id}"

    def completions(self, dispatcher_id: str) -> str:
        return f"{self.prefix}:completions:{dispatcher_id}"

    def workers(self, bucket: int) -> str:
        return f"{self.prefix}:workers:b{bucket}"


class Ledger:
    def __init__(self, client: redis.Redis, prefix: str, answered_ttl_s: int) -> None:
        self.redis = client
        self.keys = Keys(prefix)
        self.answered_ttl_s = answered_ttl_s
        self._claim = client.register_script(_CLAIM)

    # --- idempotency by (tenant, request_id) -------------------------------------------------
    def claim(self, ids: list[tuple[str, str]], owner: str, lease_ms: int) -> list[ClaimState]:
        if not ids:
            return []
        keys = [self.keys.request(t, r) for t, r in ids]
        raw = self._claim(keys=keys, args=[owner, max(1, lease_ms)])
        return [ClaimState(v.decode() if isinstance(v, bytes) else v) for v in raw]

    def mark_answered(self, ids: list[tuple[str, str]]) -> None:
        if not ids:
            return
        pipe = self.redis.pipeline(transaction=False)
        for tenant, request_id in ids:
            pipe.set(self.keys.request(tenant, request_id), ANSWERED, ex=self.answered_ttl_s)
        pipe.execute()

    def release(self, ids: list[tuple[str, str]], owner: str) -> None:
        """Drop our claims (the batch failed before answering), so a retry need not wait."""
        for tenant, request_id in ids:
            key = self.keys.request(tenant, request_id)
            if self.redis.get(key) == owner.encode():
                self.redis.delete(key)

    # --- completions -------------------------------------------------------------------------
    def notify(self, dispatcher_id: str, completion: Completion) -> None:
        key = self.keys.completions(dispatcher_id)
        pipe = self.redis.pipeline(transaction=False)
        pipe.rpush(key, completion.model_dump_json())
        pipe.expire(key, 24 * 3600)
        pipe.execute()

    def take_completions(self, dispatcher_id: str, limit: int = 1000) -> list[Completion]:
        raw = cast(list[bytes] | None, self.redis.lpop(self.keys.completions(dispatcher_id), limit))
        if not raw:
            return []
        return [Completion.model_validate_json(item) for item in raw]

    # --- worker liveness ---------------------------------------------------------------------
    def heartbeat(self, worker_id: str, buckets: list[int]) -> None:
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zadd(self.keys.workers(bucket), {worker_id: now})
            pipe.zremrangebyscore(self.keys.workers(bucket), 0, now - 60)
        pipe.execute()

    def retire(self, worker_id: str, buckets: list[int]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zrem(self.keys.workers(bucket), worker_id)
        pipe.execute()

    def live_workers(self, buckets: list[int], within_s: float) -> dict[int, int]:
        since = time.time() - within_s
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zcount(self.keys.workers(bucket), since, "+inf")
        return dict(zip(buckets, (int(n) for n in pipe.execute()), strict=True))
