"""A cached result, its expiry modes, and its byte form (JSON; zstd in S3)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from headrace.config.cache_policy import ExpiryPolicy
from headrace.schemas.results import Result


class CacheEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    tenant: str
    model: str
    result: Result
    scopes: dict[str, int]  # scope -> its generation when the request was submitted
    mode: Literal["ttl", "sliding", "tags"]
    ttl_s: float | None = None
    expires_at: float | None = None  # on the clock of whoever wrote or last touched it

    @classmethod
    def new(
        cls,
        key: str,
        tenant: str,
        model: str,
        result: Result,
        scopes: dict[str, int],
        policy: ExpiryPolicy,
        now: float,
    ) -> CacheEntry:
        return cls(
            key=key,
            tenant=tenant,
            model=model,
            result=result,
            scopes=scopes,
            mode=policy.mode,
            ttl_s=policy.ttl_s,
            expires_at=None if policy.ttl_s is None else now + policy.ttl_s,
        )

    def fresh(self, now: float) -> bool:
        return self.expires_at is None or now < self.expires_at

    def touched(self, now: float) -> CacheEntry:
        """After a hit: a sliding entry lives ``ttl_s`` from now; others are unchanged."""
        if self.mode != "sliding" or self.ttl_s is None:
            return self
        return self.model_copy(update={"expires_at": now + self.ttl_s})

    def remaining_ms(self, now: float) -> int | None:
        if self.expires_at is None:
            return None
        return max(1, int((self.expires_at - now) * 1000))

    def to_bytes(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> CacheEntry:
        return cls.model_validate_json(raw)
