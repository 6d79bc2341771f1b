"""Redis state shared by dispatcher and workers: who answered which request, completion
notices back to the dispatcher, and worker heartbeats. Key names live here only."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

import redis

from headrace.schemas.messages import Completion

ANSWERED = "answered"
WORKER_INFO_TTL_S = 60

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
SENDING_PREFIX = "sending:"

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
class ReplyAt:
    """Where a request's final reply was acknowledged by the broker."""

    topic: str
    partition: int
    offset: int

    def encode(self) -> str:
        return f"{self.partition}:{self.offset}:{self.topic}"

    @classmethod
    def decode(cls, raw: bytes) -> ReplyAt:
        partition, offset, topic = raw.decode().split(":", 2)
        return cls(topic, int(partition), int(offset))


class ClaimState(StrEnum):
    fresh = "fresh"  # claimed for us: compute and answer it
    cancelled = "cancelled"  # claimed for us, but cancelled: answer `cancelled`
    answered = "answered"  # a reply was produced already: do nothing
    busy = "busy"  # another attempt holds it now


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


class Ledger:
    def __init__(self, client: redis.Redis, prefix: str, answered_ttl_s: int) -> None:
        self.redis = client
        self.keys = Keys(prefix)
        self.answered_ttl_s = answered_ttl_s
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)
        self._begin_send = client.register_script(_BEGIN_SEND)
        self._take = client.register_script(_TAKE)

    # --- idempotency by (tenant, request_id) -------------------------------------------------
    def claim(
        self,
        ids: list[tuple[str, str]],
        owner: str,
        lease_ms: int,
        worker_id: str | None = None,
    ) -> list[ClaimState]:
        """Claim ``ids`` for ``owner`` (a batch id); with ``worker_id``, also record that this
        worker computes the batch (see ``runners``). One round trip."""
        keys = [self.keys.request(t, r) for t, r in ids] + [self.keys.cancel(t, r) for t, r in ids]
        if worker_id is not None:
            keys.append(self.keys.running)
        if not keys:
            return []
        raw = self._claim(keys=keys, args=[owner, max(1, lease_ms), worker_id or ""])
        return [ClaimState(v.decode() if isinstance(v, bytes) else v) for v in raw]

    def begin_send(self, ids: list[tuple[str, str]], owner: str, ttl_ms: int) -> list[bool]:
        """Mark ``owner``'s claims as sending; returns which of ``ids`` were cancelled."""
        if not ids:
            return []
        keys = [self.keys.request(t, r) for t, r in ids] + [self.keys.cancel(t, r) for t, r in ids]
        return [bool(flag) for flag in self._begin_send(keys=keys, args=[owner, ttl_ms])]

    def finish_batch(
        self,
        ids: list[tuple[str, str]],
        dispatcher_id: str,
        completion: Completion,
        where: Mapping[tuple[str, str], ReplyAt] | None = None,
    ) -> None:
        """Mark ``ids`` answered (``where``: their replies landed), tell the dispatcher, and
        drop the batch from the running hash, in one round trip."""
        self._notify(ids, dispatcher_id, completion, where, last=True)

    def finish_rows(
        self,
        ids: list[tuple[str, str]],
        dispatcher_id: str,
        completion: Completion,
        where: Mapping[tuple[str, str], ReplyAt] | None = None,
    ) -> None:
        """``finish_batch`` for some of a batch's requests, answered while the batch goes on
        (it stays in the running hash)."""
        self._notify(ids, dispatcher_id, completion, where, last=False)

    def _notify(
        self,
        ids: list[tuple[str, str]],
        dispatcher_id: str,
        completion: Completion,
        where: Mapping[tuple[str, str], ReplyAt] | None,
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

    def holders(self, ids: list[tuple[str, str]]) -> list[str | None]:
        """The raw claim values: an owner, ``sending:<owner>``, ``answered`` or None."""
        if not ids:
            return []
        raw = cast(list[bytes | None], self.redis.mget([self.keys.request(t, r) for t, r in ids]))
        return [v.decode() if v is not None else None for v in raw]

    def mark_answered(
        self, ids: list[tuple[str, str]], where: Mapping[tuple[str, str], ReplyAt] | None = None
    ) -> None:
        if not ids:
            return
        pipe = self.redis.pipeline(transaction=False)
        self._mark(pipe, ids, where or {})
        pipe.execute()

    def _mark(
        self,
        pipe: redis.client.Pipeline,
        ids: list[tuple[str, str]],
        where: Mapping[tuple[str, str], ReplyAt],
    ) -> None:
        ttl = self.answered_ttl_s
        for tenant, request_id in ids:
            pipe.set(self.keys.request(tenant, request_id), ANSWERED, ex=ttl)
            at = where.get((tenant, request_id))
            if at is not None:
                pipe.set(self.keys.reply_at(tenant, request_id), at.encode(), ex=ttl)

    def replies_at(self, ids: list[tuple[str, str]]) -> list[ReplyAt | None]:
        """Where each request's reply landed (None: not recorded)."""
        if not ids:
            return []
        raw = cast(list[bytes | None], self.redis.mget([self.keys.reply_at(t, r) for t, r in ids]))
        return [ReplyAt.decode(v) if v is not None else None for v in raw]

    def reclaim(self, ids: list[tuple[str, str]], owner: str, lease_ms: int) -> list[bool]:
        """Claim answered requests again whose reply the broker lost (read back: not where
        ``replies_at`` says); True for each one claimed for ``owner``."""
        if not ids:
            return []
        keys = [self.keys.request(t, r) for t, r in ids]
        got = self._take(keys=keys, args=[owner, max(1, lease_ms), *[ANSWERED] * len(ids)])
        return [bool(v) for v in got]

    def release(self, ids: list[tuple[str, str]], owner: str) -> int:
        """Drop ``owner``'s claims (its attempt died or failed before answering), so the next
        attempt need not wait for them to expire. Returns how many were released."""
        if not ids:
            return 0
        return int(self._release(keys=[self.keys.request(t, r) for t, r in ids], args=[owner]))

    def take_from_dead(
        self,
        ids: list[tuple[str, str]],
        holders: list[str],
        owner: str,
        lease_ms: int,
        beat_within_s: float,
        buckets: list[int],
    ) -> list[bool]:
        """Claim for ``owner`` those of ``ids`` whose holder (``holders``: the raw claim
        values) is an attempt computing on a worker that stopped beating: a killed worker's
        claims need not run out first. An attempt that was *sending* keeps its claim (its
        replies may be out; only the reply topic can tell)."""
        if not ids:
            return []
        batches = sorted({h for h in holders if not h.startswith(SENDING_PREFIX)})
        runner_of = dict(zip(batches, self.runners(batches), strict=True))
        live = set().union(*self.live_workers(buckets, beat_within_s).values())
        dead = {b for b, w in runner_of.items() if w is not None and w not in live}
        take = [(key, h) for key, h in zip(ids, holders, strict=True) if h in dead]
        if not take:
            return [False] * len(ids)
        keys = [self.keys.request(t, r) for (t, r), _ in take]
        got = self._take(keys=keys, args=[owner, max(1, lease_ms), *[h for _, h in take]])
        taken = {key for (key, _), ok in zip(take, got, strict=True) if ok}
        return [key in taken for key in ids]

    # --- cancellation ------------------------------------------------------------------------
    def cancel(self, tenant: str, request_id: str) -> None:
        self.redis.set(self.keys.cancel(tenant, request_id), 1, ex=self.answered_ttl_s)

    def cancelled(self, ids: list[tuple[str, str]]) -> list[bool]:
        if not ids:
            return []
        values = cast(list[bytes | None], self.redis.mget([self.keys.cancel(t, r) for t, r in ids]))
        return [v is not None for v in values]

    # --- who computes which batch ----------------------------------------------------------
    def end_batch(self, batch_id: str) -> None:
        self.redis.hdel(self.keys.running, batch_id)

    def runners(self, batch_ids: list[str]) -> list[str | None]:
        if not batch_ids:
            return []
        raw = cast(list[bytes | None], self.redis.hmget(self.keys.running, batch_ids))
        return [v.decode() if v is not None else None for v in raw]

    def epoch(self, candidate: str) -> str:
        """The store's epoch, set to ``candidate`` if it has none (a fresh or wiped Redis)."""
        self.redis.set(self.keys.epoch, candidate, nx=True)
        value = cast(bytes | None, self.redis.get(self.keys.epoch))
        return value.decode() if value is not None else candidate

    # --- completions -------------------------------------------------------------------------
    def take_completions(self, dispatcher_id: str, limit: int = 1000) -> list[Completion]:
        raw = cast(list[bytes] | None, self.redis.lpop(self.keys.completions(dispatcher_id), limit))
        if not raw:
            return []
        return [Completion.model_validate_json(item) for item in raw]

    # --- worker liveness ---------------------------------------------------------------------
    def heartbeat(
        self, worker_id: str, buckets: list[int], info: Mapping[str, object] | None = None
    ) -> None:
        """``info``: the worker's version and plan (``WorkerInfo``), kept a minute."""
        now = time.time()
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zadd(self.keys.workers(bucket), {worker_id: now})
            pipe.zremrangebyscore(self.keys.workers(bucket), 0, now - 60)
        if info is not None:
            pipe.set(self.keys.worker_info(worker_id), json.dumps(info), ex=WORKER_INFO_TTL_S)
        pipe.execute()

    def worker_info(self, worker_ids: list[str]) -> dict[str, dict[str, Any]]:
        """What each of ``worker_ids`` said of itself at its last beat (absent: nothing)."""
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
        """For each bucket, the ids of the workers that beat within ``within_s``."""
        since = time.time() - within_s
        pipe = self.redis.pipeline(transaction=False)
        for bucket in buckets:
            pipe.zrangebyscore(self.keys.workers(bucket), since, "+inf")
        return {
            bucket: {m.decode() for m in members}
            for bucket, members in zip(buckets, pipe.execute(), strict=True)
        }
