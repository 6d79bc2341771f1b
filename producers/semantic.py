"""The semantic cache, where a client meets it: a generation whose tenant and request opted
in, missed by the exact cache, may be answered with the cached answer to a near prompt of
the same scope (``cache.semantic``); a computed answer is remembered for the prompts to
come.

The prompt is embedded in this process by ``cache_semantic_model`` (the embedding model the
pipeline serves, loaded from the same registry; the first lookup loads it): a lookup must
not wait in the queue it is meant to spare. What it costs and how often it is wrong:
docs/cache.md (`./dev bench-semantic`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from headrace.cache.requests import result_entry
from headrace.cache.semantic import SemanticIndex, choose, semantic_key, semantic_scope
from headrace.cache.store import TieredCache
from headrace.config.settings import Settings
from headrace.schemas.messages import Reply, Request

if TYPE_CHECKING:  # torch and the model are imported on first use: a client without a
    # semantic cache (and every process that imports the client) never loads them
    from headrace.workers.backends.embedding import EmbeddingBackend

log = logging.getLogger(__name__)


class Embedder:
    """Prompts to unit vectors with the pipeline's embedding model, loaded on first use."""

    def __init__(self, settings: Settings) -> None:
        # its own model, at the version its registry serves (not the generation model's)
        self.settings = settings.model_copy(
            update={"model": settings.cache_semantic_model, "model_version": None}
        )
        self._backend: EmbeddingBackend | None = None
        self._lock = threading.Lock()

    def __call__(self, texts: list[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            if self._backend is None:
                self._backend = self._load()
            backend = self._backend
            items = backend.encode(texts, [True] * len(texts))
            vectors, _, _ = backend.embed(items, [True] * len(texts))
        return vectors

    def _load(self) -> EmbeddingBackend:
        from headrace.workers.backends.embedding import EmbeddingBackend
        from headrace.workers.loading import load_backend

        backend = load_backend(self.settings, [self.settings.buckets[0]])
        assert isinstance(backend, EmbeddingBackend), "cache_semantic_model embeds"
        return backend


@dataclass
class Lookup:
    """A semantic lookup: the reply that serves the request, or the prompt's vector (to
    remember the answer under once it is computed)."""

    reply: Reply | None
    vector: npt.NDArray[np.float32] | None = None


class SemanticCache:
    def __init__(self, settings: Settings, cache: TieredCache, embedder: Embedder) -> None:
        self.settings = settings
        self.cache = cache
        self.embed = embedder
        self.index = SemanticIndex(cache.l2.redis, settings.topic_prefix)
        self.threshold = settings.cache_semantic_threshold

    def allows(self, tenant: str) -> bool:
        tenants = self.settings.cache_semantic_tenants
        return "*" in tenants or tenant in tenants

    def lookup(self, request: Request, version: str) -> Lookup:
        """A reply from the answer to a near prompt, if one passes (else the vector)."""
        try:
            vector = self.embed([request.input])[0]
            neighbours = self.index.search(semantic_scope(request, version), vector)
        except Exception:  # the semantic cache is a shortcut, never a failure
            log.warning("semantic cache lookup failed", exc_info=True)
            return Lookup(None)
        choice = choose(request.input, neighbours, self.threshold)
        for neighbour, why in choice.refused:
            log.debug("semantic neighbour at %.3f refused: %s", neighbour.similarity, why)
        if choice.served is None:
            return Lookup(None, vector)
        hit = self.cache.get(choice.served.key)
        if hit is None:  # its answer expired or was invalidated
            return Lookup(None, vector)
        reply = Reply(
            request_id=request.request_id,
            tenant=request.tenant,
            model=request.model,
            result=hit.entry.result,
            cache_tier=hit.tier,
            semantic_similarity=round(choice.served.similarity, 4),
            model_version=version,
        )
        return Lookup(reply)

    def remember(
        self, request: Request, version: str, vector: npt.NDArray[np.float32], reply: Reply
    ) -> None:
        """``reply``'s answer under ``request``'s prompt, for the prompts to come: an entry
        of the request's class and tags (written only if none of its scopes was invalidated
        since it was submitted), and the prompt in its scope's index."""
        if reply.result is None:
            return
        scope = semantic_scope(request, version)
        key = semantic_key(scope, request.input)
        entry = result_entry(
            request, reply.result, version, self.settings.cache_classes, time.time(), key
        )
        if entry is None:  # no directive, or Redis was away when it was sent
            return
        try:
            if self.cache.put(entry):
                self.index.add(scope, vector, request.input, key)
        except Exception:
            log.warning("semantic cache entry not written", exc_info=True)
