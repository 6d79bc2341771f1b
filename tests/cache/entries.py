"""An entry as a worker would write it: the scopes' generations read from the cache now
(as the client reads them when it submits)."""

from __future__ import annotations

from collections.abc import Sequence

from headrace.cache.entry import CacheEntry
from headrace.cache.keys import cache_key, entry_scopes
from headrace.cache.store import TieredCache
from headrace.config.cache_policy import ExpiryPolicy
from headrace.schemas.messages import EmbeddingResult
from headrace.schemas.params import EmbedParams

TTL = ExpiryPolicy(mode="ttl", ttl_s=600)
TAGS = ExpiryPolicy(mode="tags")


def new_entry(
    cache: TieredCache,
    tenant: str,
    text: str,
    tags: Sequence[str] = (),
    policy: ExpiryPolicy = TTL,
    embedding: Sequence[float] = (0.1, 0.2),
) -> CacheEntry:
    generations = cache.generations(entry_scopes(tenant, "m", "v1", list(tags)))
    assert generations is not None, "Redis is not reachable"
    return CacheEntry.new(
        key=cache_key(tenant, "m", "v1", "embed", text, EmbedParams()),
        tenant=tenant,
        model="m",
        result=EmbeddingResult(embedding=list(embedding), token_count=2, truncated=False),
        scopes=generations,
        policy=policy,
        now=cache.clock(),
    )
