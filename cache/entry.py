"""A cached result, its expiry modes, and its byte form (JSON; zstd in S3)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.messages import EmbeddingResult


class ExpiryPolicy(BaseModel):
    """``ttl``: gone ``ttl_s`` after it was written. ``sliding``: gone after ``ttl_s``
    without a hit. ``tags``: kept until one of its scopes is invalidated (``ttl_s``, if set,
    is a backstop)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["ttl", "sliding", "tags"]
    ttl_s: float | None = Field(default=None, gt=0)

    def model_post_init(self, _: object) -> None:
        if self.mode != "tags" and self.ttl_s is None:
            raise ValueError(f"expiry mode {self.mode!r} needs ttl_s")


DEFAULT_CLASSES: dict[str, ExpiryPolicy] = {
    "default": ExpiryPolicy(mode="ttl", ttl_s=24 * 3600),
    "sliding": ExpiryPolicy(mode="sliding", ttl_s=3600),
    "tagged": ExpiryPolicy(mode="tags"),
}


class CacheEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str
    tenant: str
    model: str
    result: EmbeddingResult
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
        result: EmbeddingResult,
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
