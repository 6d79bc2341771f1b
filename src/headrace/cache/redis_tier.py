"""L2 in Redis, and what every tier relies on: the generation counter of each scope, the tag
index, and the broadcast that evicts every process's L1.

Reads and writes compare an entry's scope generations with the current ones inside one Lua
script: an entry from before an invalidation is never served, and a result computed for a
request submitted before an invalidation is never written (the stale-write race). The scripts
name keys they build from ARGV, which a single Redis (or one Redis Cluster slot) allows."""

from __future__ import annotations

import json
from collections.abc import Iterable

import redis

from headrace.cache.entry import CacheEntry

_GET = """
local e = redis.call('HMGET', KEYS[1], 'v', 's', 'sl')
if not e[1] then return false end
local scopes = cjson.decode(e[2])
for scope, gen in pairs(scopes) do
  if tonumber(redis.call('GET', ARGV[1] .. scope) or '0') ~= tonumber(gen) then
    redis.call('DEL', KEYS[1])
    return false
  end
end
if e[3] and e[3] ~= '' then redis.call('PEXPIRE', KEYS[1], e[3]) end
return e[1]
"""

_PUT = """
local scopes = cjson.decode(ARGV[3])
for scope, gen in pairs(scopes) do
  if tonumber(redis.call('GET', ARGV[1] .. scope) or '0') ~= tonumber(gen) then return 0 end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[2], 's', ARGV[3], 'sl', ARGV[5])
if ARGV[4] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
for scope, _ in pairs(scopes) do
  if string.find(scope, '/tag/', 1, true) then redis.call('SADD', ARGV[6] .. scope, ARGV[7]) end
end
return 1
"""

_INVALIDATE = """
local n = tonumber(ARGV[4])
local gone = {}
for i = 5, 4 + n do
  local scope = ARGV[i]
  redis.call('INCR', ARGV[1] .. scope)
  for _, k in ipairs(redis.call('SMEMBERS', ARGV[2] .. scope)) do
    gone[#gone + 1] = k
    redis.call('DEL', ARGV[3] .. k)
  end
  redis.call('DEL', ARGV[2] .. scope)
end
for i = 5 + n, #ARGV do
  gone[#gone + 1] = ARGV[i]
  redis.call('DEL', ARGV[3] .. ARGV[i])
end
return gone
"""


class RedisTier:
    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        base = f"{prefix}:cache"
        self._entry = f"{base}:e:"
        self._gen = f"{base}:g:"
        self._index = f"{base}:i:"
        self.stats_key = f"{base}:stats"
        self.channel = f"{base}:evict"
        self._get = client.register_script(_GET)
        self._put = client.register_script(_PUT)
        self._invalidate = client.register_script(_INVALIDATE)

    def generations(self, scopes: list[str]) -> dict[str, int]:
        values = self.redis.mget([self._gen + s for s in scopes])
        return {s: int(v or 0) for s, v in zip(scopes, values, strict=True)}

    def valid(self, entry: CacheEntry) -> bool:
        """Are all of ``entry``'s scope generations still current?"""
        return self.generations(list(entry.scopes)) == entry.scopes

    def get(self, key: str) -> CacheEntry | None:
        raw = self._get(keys=[self._entry + key], args=[self._gen])
        return None if raw is None else CacheEntry.from_bytes(raw)

    def put(self, entry: CacheEntry, now: float) -> bool:
        """Write ``entry`` unless one of its scopes was invalidated since its generations were
        read. Returns whether it was written."""
        return self.put_many([entry], now)[0]

    def put_many(self, entries: list[CacheEntry], now: float) -> list[bool]:
        """``put`` for each entry, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for entry in entries:
            remaining = entry.remaining_ms(now)
            sliding = "" if entry.mode != "sliding" or not entry.ttl_s else int(entry.ttl_s * 1000)
            self._put(
                keys=[self._entry + entry.key],
                args=[
                    self._gen,
                    entry.to_bytes(),
                    json.dumps(entry.scopes),
                    "" if remaining is None else remaining,
                    sliding,
                    self._index,
                    entry.key,
                ],
                client=pipe,
            )
        return [bool(r) for r in pipe.execute()]

    def invalidate(self, scopes: Iterable[str], keys: Iterable[str]) -> list[str]:
        """Bump each scope's generation, delete the entries its index names and ``keys``;
        returns the keys deleted (for the tiers below)."""
        scopes = list(scopes)
        args: list[str | int] = [self._gen, self._index, self._entry, len(scopes), *scopes, *keys]
        gone = self._invalidate(keys=[], args=args)
        return [k.decode() if isinstance(k, bytes) else str(k) for k in gone]

    def publish_eviction(self, scopes: list[str], keys: list[str]) -> None:
        self.redis.publish(self.channel, json.dumps({"scopes": scopes, "keys": keys}))

    def count(self, field: str, by: int = 1) -> None:
        self.redis.hincrby(self.stats_key, field, by)

    def stats(self) -> dict[str, int]:
        raw = self.redis.hgetall(self.stats_key)
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}

    def entry_count(self) -> int:
        return sum(1 for _ in self.redis.scan_iter(match=self._entry + "*", count=1000))
