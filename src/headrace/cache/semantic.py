"""The semantic cache's index: prompts near a new one, within one scope (tenant, model,
version, task and every parameter: only an answer to the same question under the same
parameters may serve), and the rule that picks the one to serve (``choose``).

Each scope is a Redis stream of (vector, prompt, entry key) that every process appends to
(capped at ``MAX_PER_SCOPE``); each process keeps an HNSW index (usearch) of what it has
read and reads what is new before each search (one XRANGE, empty when nothing is). Redis
7.0, which this project runs, has no vector search of its own (RediSearch is a module; Redis
8's vector sets are not in 7.0), so the search is usearch's: HNSW, cosine, float32. The
answer itself is an ordinary cache entry under the neighbour's key: expiry classes, tags and
upstream invalidation apply to it as to any entry, and a neighbour whose entry is gone
serves nothing (the request is computed).
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from cachetools import LRUCache
from usearch.index import Index

from headrace.cache.keys import cache_key
from headrace.cache.semantic_guards import Conflict, conflict
from headrace.schemas.messages import Request

MAX_PER_SCOPE = 100_000  # a scope's stream is trimmed to about this many prompts
SCOPES_HELD = 1_000  # scopes whose index a process keeps (least recently used dropped)
NEIGHBOURS = 4  # searched per lookup: the nearest that passes the guards is served


@dataclass(frozen=True)
class Neighbour:
    similarity: float  # cosine
    prompt: str
    key: str  # its answer's cache entry


@dataclass(frozen=True)
class Choice:
    """What ``choose`` found: the neighbour to serve, or why none."""

    served: Neighbour | None
    refused: tuple[tuple[Neighbour, Conflict], ...] = ()  # near enough, but a guard objected


def choose(prompt: str, neighbours: Sequence[Neighbour], threshold: float) -> Choice:
    """The nearest neighbour at least ``threshold`` similar that no guard objects to."""
    refused: list[tuple[Neighbour, Conflict]] = []
    for n in sorted(neighbours, key=lambda n: -n.similarity):
        if n.similarity < threshold:
            break
        why = conflict(n.prompt, prompt)
        if why is None:
            return Choice(n, tuple(refused))
        refused.append((n, why))
    return Choice(None, tuple(refused))


def semantic_scope(request: Request, model_version: str) -> str:
    """Everything but the prompt that an answer depends on."""
    return cache_key(request.tenant, request.model, model_version, request.task, "", request.params)


def semantic_key(scope: str, prompt: str) -> str:
    """The cache key of the answer to ``prompt`` in ``scope``."""
    return "sem-" + hashlib.sha256(f"{scope}\n{prompt}".encode()).hexdigest()


class SemanticIndex:
    def __init__(self, redis: Any, prefix: str) -> None:
        self.redis = redis
        self.prefix = prefix
        self._scopes: LRUCache[str, _Scope] = LRUCache(maxsize=SCOPES_HELD)
        self._lock = threading.Lock()

    def add(self, scope: str, vector: npt.NDArray[np.float32], prompt: str, key: str) -> None:
        fields = {"v": base64.b64encode(vector.astype("<f4").tobytes()), "p": prompt, "k": key}
        self.redis.xadd(self._stream(scope), fields, maxlen=MAX_PER_SCOPE, approximate=True)

    def search(self, scope: str, vector: npt.NDArray[np.float32]) -> list[Neighbour]:
        with self._lock:
            held = self._scopes.get(scope)
            if held is None:
                held = self._scopes[scope] = _Scope(len(vector))
            held.read(self.redis, self._stream(scope))
            return held.nearest(vector, NEIGHBOURS)

    def size(self, scope: str) -> int:
        """Prompts in ``scope``, over every process."""
        return int(self.redis.xlen(self._stream(scope)))

    def drop(self, scope: str) -> None:
        """Forget ``scope``'s prompts, here and in Redis."""
        with self._lock:
            self._scopes.pop(scope, None)
        self.redis.delete(self._stream(scope))

    def _stream(self, scope: str) -> str:
        return f"{self.prefix}:semantic:{scope}"


class _Scope:
    """One scope's prompts as this process has read them."""

    def __init__(self, dims: int) -> None:
        self.index = Index(ndim=dims, metric="cos", dtype="f32")
        self.rows: list[tuple[str, str]] = []  # (prompt, key) by index label
        self.last_id = "0-0"

    def read(self, redis: Any, stream: str) -> None:
        while True:
            new = redis.xrange(stream, min=f"({self.last_id}", count=1000)
            if not new:
                return
            vectors = []
            for entry_id, fields in new:
                vectors.append(np.frombuffer(base64.b64decode(fields[b"v"]), dtype="<f4"))
                self.rows.append((fields[b"p"].decode(), fields[b"k"].decode()))
                self.last_id = entry_id.decode()
            labels = np.arange(len(self.rows) - len(vectors), len(self.rows), dtype=np.uint64)
            self.index.add(labels, np.stack(vectors))

    def nearest(self, vector: npt.NDArray[np.float32], k: int) -> list[Neighbour]:
        if not self.rows:
            return []
        found = self.index.search(vector.astype(np.float32), min(k, len(self.rows)))
        return [
            Neighbour(1.0 - float(distance), *self.rows[int(label)])
            for label, distance in zip(found.keys, found.distances, strict=True)
        ]
