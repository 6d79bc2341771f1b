"""The ledger in Redis: one Lua script per rule that must be atomic. Key names live here
only."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import redis

from headrace.schemas.messages import Completion
from headrace.workers.ledger.base import (
    ANSWERED,
    BEATS_KEPT_S,
    WORKER_INFO_TTL_S,
    ClaimState,
    Key,
    Ledger,
    ReplyAt,
)

# KEYS holds n request keys, then their n cancel keys, then (optional) the running hash. For
# each request: answered -> "answered"; claimed by another owner -> "busy"; otherwise claim it
# for ARGV[1] for ARGV[2] ms and say "cancelled" if its cancel key exists, else "fresh". With
# the running hash, record ARGV[1] (the batch) as computed by worker ARGV[3].
_CLAIM = """
local n = math.floor(#KEYS / 2)
if #KEYS % 2 == 1 then
  redis.call('HSET', KEYS[#KEYS], ARGV[1], ARGV[3])
end
local out = {}
for i = 1, n do
  local key = KEYS[i]
  local v = redis.call('GET', key)
  if v == 'answered' then
    out[i] = 'answered'
  elseif v and v ~= ARGV[1] then
    out[i] = 'busy'
  else
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    if redis.call('EXISTS', KEYS[n + i]) == 1 then
      out[i] = 'cancelled'
    else
      out[i] = 'fresh'
    end
  end
end
return out
"""

# Delete each claim that ARGV[1] still holds, computing or sending (a dead or failed attempt's,
# so the next attempt can claim at once).
_RELEASE = """
local n = 0
for _, key in ipairs(KEYS) do
  local v = redis.call('GET', key)
  if v == ARGV[1] or v == 'sending:' .. ARGV[1] then
    redis.call('DEL', key)
    n = n + 1
  end
end
return n
"""

# KEYS: n request keys, then their n cancel keys. Turn ARGV[1]'s claims into
# "sending:<owner>" for ARGV[2] ms (its replies are going out; if it dies now only the reply
# topic can tell whether they did) and say which requests were cancelled meanwhile.
_BEGIN_SEND = """
local n = #KEYS / 2
local out = {}
for i = 1, n do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('SET', KEYS[i], 'sending:' .. ARGV[1], 'PX', ARGV[2])
  end
  out[i] = redis.call('EXISTS', KEYS[n + i])
end
return out
"""

# Take for ARGV[1], for ARGV[2] ms, each claim whose value is still ARGV[i + 2]: "answered"
# (its reply was lost by the broker), or a dead worker's attempt that was computing (it sent
# nothing). Says which.
_TAKE = """
local out = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 2] then
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
"""


@dataclass(frozen=True)
class Keys:
    prefix: str

    def request(self, tenant: str, request_id: str) -> str:
        return f"{self.prefix}:req:{tenant}:{request_id}"

    def reply_at(self, tenant: str, request_id: str) -> str:
        """Where the request's reply landed (``ReplyAt``), kept as long as its mark."""
        return f"{self.prefix}:at:{tenant}:{request_id}"

    def cancel(self, tenant: str, request_id: str) -> str:
        return f"{self.prefix}:cancel:{tenant}:{request_id}"

    @property
    def running(self) -> str:
        """Hash batch_id -> id of the worker computing it."""
        return f"{self.prefix}:running"

    @property
    def epoch(self) -> str:
        """A random value set once; if it vanishes, Redis lost its data."""
        return f"{self.prefix}:epoch"

    def completions(self, dispatcher_id: str) -> str:
        return f"{self.prefix}:completions:{dispatcher_id}"

    def workers(self, bucket: int) -> str:
        return f"{self.prefix}:workers:b{bucket}"

    def worker_info(self, worker_id: str) -> str:
        """What a live worker says of itself with each beat: its model version and its
        memory plan (rows per bucket), JSON; gone a minute after its last beat."""
        return f"{self.prefix}:worker:{worker_id}"


class RedisLedger(Ledger):
    def __init__(self, client: redis.Redis, prefix: str, answered_ttl_s: int) -> None:
        self.redis = client
        self.keys = Keys(prefix)
        self.answered_ttl_s = answered_ttl_s
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)
        self._begin_send = client.register_script(_BEGIN_SEND)
        self._take = client.register_script(_TAKE)

    def _pairs(self, ids: list[Key]) -> list[str]:
        """Each request's key, then each one's cancel key (the scripts' KEYS)."""
        return [self.keys.request(t, r) for t, r in ids] + [self.keys.cancel(t, r) for t, r in ids]

    def claim(
        self, ids: list[Key], owner: str, lease_ms: int, worker_id: str | None = None
    ) -> list[ClaimState]:
        keys = self._pairs(ids)
        if worker_id is not None:
            keys.append(self.keys.running)
        if not keys:
            return []
        raw = self._claim(keys=keys, args=[owner, max(1, lease_ms), worker_id or ""])
        return [ClaimState(v.decode() if isinstance(v, bytes) else v) for v in raw]

    def begin_send(self, ids: list[Key], owner: str, ttl_ms: int) -> list[bool]:
        if not ids:
            return []
        return [bool(f) for f in self._begin_send(keys=self._pairs(ids), args=[owner, ttl_ms])]

    def finish(
        self,
        ids: list[Key],
        dispatcher_id: str,
        completion: Completion,
        where: Mapping[Key, ReplyAt] | None,
        *,
        last: bool,
    ) -> None:
        pipe = self.redis.pipeline(transaction=False)
        self._mark(pipe, ids, where or {})
        key = self.keys.completions(dispatcher_id)
        pipe.rpush(key, completion.model_dump_json())
        pipe.expire(key, 24 * 3600)
        if last:
            pipe.hdel(self.keys.running, completion.batch_id)
        pipe.execute()

    def holders(self, ids: list[Key]) -> list[str | None]:
        if not ids:
            return []
        raw = cast(list[bytes | None], self.redis.mget([self.keys.request(t, r) for t, r in ids]))
        return [v.decode() if v is not None else None for v in raw]

    def mark_answered(self, ids: list[Key], where: Mapping[Key, ReplyAt] | None = None) -> None:
        if not ids:
            return
        pipe = self.redis.pipeline(transaction=False)
        self._mark(pipe, ids, where or {})
        pipe.execute()

    def _mark(
        self, pipe: redis.client.Pipeline, ids: list[Key], where: Mapping[Key, ReplyAt]
    ) -> None:
        ttl = self.answered_ttl_s
        for tenant, request_id in ids:
            pipe.set(self.keys.request(tenant, request_id), ANSWERED, ex=ttl)
            at = where.get((tenant, request_id))
            if at is not None:
                pipe.set(self.keys.reply_at(tenant, request_id), at.encode(), ex=ttl)

    def replies_at(self, ids: list[Key]) -> list[ReplyAt | None]:
        if not ids:
            return []
        raw = cast(list[bytes | None], self.redis.mget([self.keys.reply_at(t, r) for t, r in ids]))
        return [ReplyAt.decode(v) if v is not None else None for v in raw]

    def take_if(self, ids: list[Key], expected: list[str], owner: str, lease_ms: int) -> list[bool]:
        if not ids:
            return []
        keys = [self.keys.request(t, r) for t, r in ids]
        return [bool(v) for v in self._take(keys=keys, args=[owner, max(1, lease_ms), *expected])]

    def release(self, ids: list[Key], owner: str) -> int:
        if not ids:
            return 0
        return int(self._release(keys=[self.keys.request(t, r) for t, r in ids], args=[owner]))

    def cancel(self, tenant: str, request_id: str) -> None:
        self.redis.set(self.keys.cancel(tenant, request_id), 1, ex=self.answered_ttl_s)

    def cancelled(self, ids: list[Key]) -> list[bool]:
        if not ids:
            return []
        values = cast(list[bytes | None], self.redis.mget([self.keys.cancel(t, r) for t, r in ids]))
        return [v is not None for v in values]

    def end_batch(self, batch_id: str) -> None:
        self.redis.hdel(self.keys.running, batch_id)

    def runners(self, batch_ids: list[str]) -> list[str | None]:
        if not batch_ids:
            return []
        raw = cast(list[bytes | None], self.redis.hmget(self.keys.running, batch_ids))
        return [v.decode() if v is not None else None for v in raw]

    def epoch(self, candidate: str) -> str:
        self.redis.set(self.keys.epoch, candidate, nx=True)
        value = cast(bytes | None, self.redis.get(self.keys.epoch))
        return value.decode() if value is not None else candidate

    def take_completions(self, dispatcher_id: str, limit: int = 1000) -> list[Completion]:
        raw = cast(list[bytes] | None, self.redis.lpop(self.keys.completions(dispatcher_id), limit))
        if not raw:
            return []
        return [Completion.model_validate_json(item) for item in raw]

    def heartbeat(
        self, worker_id: str, buckets: list[int], info: Mapping[str, object] | None = None
    ) -> None:
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zadd(self.keys.workers(bucket), {worker_id: now})
            pipe.zremrangebyscore(self.keys.workers(bucket), 0, now - BEATS_KEPT_S)
        if info is not None:
            pipe.set(self.keys.worker_info(worker_id), json.dumps(info), ex=WORKER_INFO_TTL_S)
        pipe.execute()

    def worker_info(self, worker_ids: list[str]) -> dict[str, dict[str, Any]]:
        if not worker_ids:
            return {}
        raw = cast(
            list[bytes | None], self.redis.mget([self.keys.worker_info(w) for w in worker_ids])
        )
        return {w: json.loads(v) for w, v in zip(worker_ids, raw, strict=True) if v is not None}

    def retire(self, worker_id: str, buckets: list[int]) -> None:
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zrem(self.keys.workers(bucket), worker_id)
        pipe.delete(self.keys.worker_info(worker_id))
        pipe.execute()

    def live_workers(self, buckets: list[int], within_s: float) -> dict[int, set[str]]:
        since = time.time() - within_s
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zrangebyscore(self.keys.workers(bucket), since, "+inf")
        return {
            bucket: {m.decode() for m in members}
            for bucket, members in zip(buckets, pipe.execute(), strict=True)
        }
