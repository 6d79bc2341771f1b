"""The worker's write-through: each computed result whose request asked for it is written to
L2 (before the replies go out, so a client that has its reply finds the entry) and L3 (in the
background), unless one of its scopes was invalidated after the request was submitted."""

from __future__ import annotations

import time
from collections.abc import Callable

from headrace.cache.requests import cacheable, result_entry
from headrace.cache.store import TieredCache
from headrace.config.settings import Settings
from headrace.schemas.messages import BatchItem, Reply


class ResultWriter:
    def __init__(
        self,
        cache: TieredCache,
        settings: Settings,
        model_version: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cache = cache
        self.classes = settings.cache_classes
        self.model_version = model_version
        self.clock = clock

    def __call__(self, replies: list[tuple[BatchItem, Reply]]) -> None:
        entries = []
        for item, reply in replies:
            result = reply.result
            if result is None or item.request.cache is None or not cacheable(item.request, result):
                continue  # errors are not cached, nor generations that would not repeat
            entry = result_entry(
                item.request, result, self.model_version, self.classes, self.clock()
            )
            if entry is not None:
                entries.append(entry)
        self.cache.put_many(entries)
