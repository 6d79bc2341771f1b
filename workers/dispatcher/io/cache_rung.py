"""The dispatcher's reads of the result cache, off the poll loop (two threads).

- The degradation ladder's cache rung (``LookUpCache``): what to answer is the cached result
  (even a stale one), marked, or the rung below (``LookUpCache.otherwise``). The key is the
  one a client would use: the version the model's traffic policy gives the request, then
  the model's previous stable version (a result it computed is better than a canned
  answer).
- In-flight coalescing (``Share``): a leader's result, written by its worker, answers the
  requests that waited on it; where there is none (a fresh entry, never a stale one), they
  are ``NotShared``.

The cache opens on first use; a cache that cannot be read is a miss.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace

from headrace.cache.requests import request_key
from headrace.cache.store import TieredCache, open_cache
from headrace.config.settings import Settings
from headrace.models.registry import serving_version
from headrace.models.traffic import TrafficPolicy
from headrace.schemas.messages import Degraded
from headrace.workers.dispatcher.events import Answer, LookUpCache, NotShared, Share

log = logging.getLogger(__name__)


class CacheRung:
    def __init__(self, settings: Settings, policy: Callable[[], TrafficPolicy | None]) -> None:
        """``policy``: the model's traffic policy as the dispatcher last read it."""
        self.settings = settings
        self.policy = policy
        self._cache: TieredCache | None = None
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ladder-cache")
        self._looking: list[Future[list[Answer | NotShared]]] = []

    def submit(self, action: LookUpCache) -> None:
        policy = self.policy()
        previous = policy.previous_stable if policy is not None else None
        self._looking.append(self._pool.submit(lambda: [self._look_up(action, previous)]))

    @property
    def pending(self) -> bool:
        """Lookups under way (the poll loop wakes often to carry their outcomes out)."""
        return bool(self._looking)

    def share(self, action: Share) -> None:
        self._looking.append(self._pool.submit(self._share, action))

    def results(self) -> list[Answer | NotShared]:
        """What the lookups that finished found, in the order they were asked: answers, and
        the requests a ``Share`` found no result for."""
        done = [f for f in self._looking if f.done()]
        if done:
            self._looking = [f for f in self._looking if not f.done()]
        return [outcome for f in done for outcome in f.result()]

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)

    def _look_up(self, action: LookUpCache, previous: str | None) -> Answer:
        request = action.request
        try:
            cache = self._cache or self._open()
            versions = dict.fromkeys([serving_version(self.settings, request), previous])
            for version in (v for v in versions if v is not None):
                found = cache.get_even_stale(request_key(request, version))
                if found is None:
                    continue
                hit, stale = found
                return replace(
                    action.otherwise,
                    error=None,
                    result=hit.entry.result,
                    degraded=Degraded(rung="cache", reason=action.reason, stale=stale),
                    model_version=version,
                    cache_tier=hit.tier,
                )
        except Exception:  # the cache is a rung, never a failure: the rung below answers
            log.warning("the ladder's cache lookup failed", exc_info=True)
        return action.otherwise

    def _share(self, action: Share) -> list[Answer | NotShared]:
        leader = action.leader
        version = action.version or serving_version(self.settings, leader)
        try:
            cache = self._cache or self._open()
            hit = cache.get(request_key(leader, version))
        except Exception:  # not found is not failed: the followers are computed
            log.warning("a coalesced result's lookup failed", exc_info=True)
            hit = None
        if hit is None:
            return [NotShared([a.ref for a in action.answers])]
        result = hit.entry.result
        return [
            replace(a, result=result, model_version=version, cache_tier=hit.tier)
            for a in action.answers
        ]

    def _open(self) -> TieredCache:
        self._cache = open_cache(self.settings, l1=False)
        return self._cache
