"""Which topics exist, asked of the broker for a name not seen before.

A Kafka producer sending to a topic the broker does not have waits for its metadata
(``max_block_ms``, 10 s) before failing; with automatic topic creation off (as in compose),
a request naming a made-up reply topic would stall whoever sends to it. The dispatcher
refuses such a request (no worker meets it, and workers create no topics) and sends no error
reply there: a name not known is looked up (one metadata round trip), and a name found
missing is not looked up again for ``ttl_s``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from cachetools import TTLCache

log = logging.getLogger(__name__)

TTL_S = 1.0


class KnownTopics:
    def __init__(
        self,
        list_topics: Callable[[], set[str]],
        clock: Callable[[], float],
        ttl_s: float = TTL_S,
        max_missing: int = 10_000,
    ) -> None:
        self._list = list_topics
        self._known: set[str] = set()
        # names found missing, not asked about again for ttl_s (bounded: a flood of names
        # pushes the oldest out)
        self._missing: TTLCache[str, bool] = TTLCache(max_missing, ttl_s, timer=clock)

    def exists(self, topic: str) -> bool:
        """True if the broker has ``topic``: known from an earlier listing, or listed now
        (unless it was found missing within ``ttl_s``). A failed listing counts as yes: the
        send then says what is wrong."""
        if topic in self._known:
            return True
        if topic in self._missing:
            return False
        try:
            self._known = self._list()
        except Exception as exc:  # the broker away: do not refuse on what is not known
            log.warning("could not list topics (%s)", exc)
            return True
        if topic in self._known:
            return True
        self._missing[topic] = True
        return False
