"""Per-tenant usage counted in Redis, one hash per (tenant, minute): workers add each batch's
replies (requests, tokens, their share of device time), clients add their cache hits.

A closed minute is taken for the SQL store by renaming its hash to a flush key of its own
(``take_closed``): the rename is atomic, so a late increment starts a new hash instead of
being lost, and the flush key's name is what makes moving it to SQL exactly-once (the store
records which flush keys it applied; one left behind by a crashed flusher is applied or
dropped on the next pass). Keys carry the tenant: ``<prefix>:usage:<tenant>:<minute>``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis

CLOSED_AFTER_S = 120.0  # a minute is closed once no batch can still be counting into it
KEY_TTL_S = 7 * 24 * 3600  # what no flusher moved in a week is dropped


@dataclass
class Totals:
    requests: int = 0
    tokens: int = 0
    device_ms: float = 0.0
    cache_hits: int = 0

    def __iadd__(self, other: Totals) -> Totals:
        self.requests += other.requests
        self.tokens += other.tokens
        self.device_ms += other.device_ms
        self.cache_hits += other.cache_hits
        return self

    @classmethod
    def from_hash(cls, raw: Mapping[Any, Any]) -> Totals:
        """From a Redis hash (bytes or str keys, as the client decodes)."""
        fields = {_text(k): float(_text(v)) for k, v in raw.items()}

        def get(name: str) -> float:
            return fields.get(name, 0.0)

        return cls(
            requests=int(get("requests")),
            tokens=int(get("tokens")),
            device_ms=get("device_ms"),
            cache_hits=int(get("cache_hits")),
        )


@dataclass(frozen=True)
class Taken:
    """A minute of one tenant's usage, taken from Redis under ``flush_key``."""

    flush_key: str
    tenant: str
    minute: int  # unix seconds // 60
    totals: Totals


class UsageMeter:
    def __init__(
        self, client: redis.Redis, prefix: str, clock: Callable[[], float] = time.time
    ) -> None:
        self.redis = client
        self.prefix = prefix
        self.clock = clock
        self._open = f"{prefix}:usage:open"  # set of hashes still counting
        self._flushing = f"{prefix}:usage:flushing"  # set of flush keys not yet applied

    def _key(self, tenant: str, minute: int) -> str:
        return f"{self.prefix}:usage:{tenant}:{minute}"

    def add(self, per_tenant: Mapping[str, Totals]) -> None:
        """Count ``per_tenant`` into the current minute, in one round trip."""
        if not per_tenant:
            return
        minute = int(self.clock() // 60)
        pipe = self.redis.pipeline(transaction=False)
        for tenant, t in per_tenant.items():
            key = self._key(tenant, minute)
            if t.requests:
                pipe.hincrby(key, "requests", t.requests)
            if t.tokens:
                pipe.hincrby(key, "tokens", t.tokens)
            if t.device_ms:
                pipe.hincrbyfloat(key, "device_ms", t.device_ms)
            if t.cache_hits:
                pipe.hincrby(key, "cache_hits", t.cache_hits)
            pipe.expire(key, KEY_TTL_S)
            pipe.sadd(self._open, key)
        pipe.execute()

    def take_closed(self, closed_after_s: float = CLOSED_AFTER_S) -> list[Taken]:
        """Every closed minute, renamed to a flush key (and flush keys left by an earlier
        pass): what the SQL store should apply. Call ``applied`` for each once stored."""
        now_minute = (self.clock() - closed_after_s) // 60
        for raw in self.redis.smembers(self._open):
            key = _text(raw)
            _, minute = self._parse(key)
            if minute > now_minute:
                continue
            flush_key = f"{key}:flush:{uuid.uuid4().hex}"
            try:
                self.redis.rename(key, flush_key)
            except redis.ResponseError:  # gone: expired, or another flusher took it
                self.redis.srem(self._open, key)
                continue
            pipe = self.redis.pipeline(transaction=True)
            pipe.sadd(self._flushing, flush_key)
            pipe.srem(self._open, key)
            pipe.execute()
        return list(self._flush_keys())

    def _flush_keys(self) -> Iterable[Taken]:
        for raw in self.redis.smembers(self._flushing):
            flush_key = _text(raw)
            values = self.redis.hgetall(flush_key)
            if not values:  # expired before any flusher applied it
                self.redis.srem(self._flushing, flush_key)
                continue
            tenant, minute = self._parse(flush_key.rsplit(":flush:", 1)[0])
            yield Taken(flush_key, tenant, minute, Totals.from_hash(values))

    def applied(self, taken: Taken) -> None:
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(taken.flush_key)
        pipe.srem(self._flushing, taken.flush_key)
        pipe.execute()

    def still_open(self, since_minute: int) -> list[Taken]:
        """Minutes not yet taken (read, not moved), for a report that must be current."""
        out = []
        for raw in self.redis.smembers(self._open):
            key = _text(raw)
            tenant, minute = self._parse(key)
            if minute >= since_minute and (values := self.redis.hgetall(key)):
                out.append(Taken(key, tenant, minute, Totals.from_hash(values)))
        return out

    def _parse(self, key: str) -> tuple[str, int]:
        """(tenant, minute) of ``<prefix>:usage:<tenant>:<minute>`` (a tenant may hold ':')."""
        rest = key.removeprefix(f"{self.prefix}:usage:")
        tenant, _, minute = rest.rpartition(":")
        return tenant, int(minute)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def totals_by_tenant(rows: Iterable[tuple[str, Totals]]) -> dict[str, Totals]:
    out: dict[str, Totals] = {}
    for tenant, totals in rows:
        out.setdefault(tenant, Totals()).__iadd__(totals)
    return out
