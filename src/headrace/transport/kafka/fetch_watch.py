"""Spots a partition whose fetch stopped: records are in the log past the consumer's
position (the fetch responses say so through the high watermark) but the position does not
move. Seen after a tansu restart: one request partition sat at offset 345 with its log at 411
for minutes, while the others were read; the requests there, and their clients' resends, were
never dispatched. The first remedy is to seek the partition to its own position (which drops
the client's fetch state for it); if that does not help, the consumer is replaced."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum


class Remedy(Enum):
    seek = "seek"
    renew = "renew"


@dataclass
class _Stuck:
    position: int
    since: float
    sought: bool = False


class FetchWatch:
    """Pure policy with an injected clock: ``observe`` each partition now and then; it
    answers with the remedy due, if any."""

    def __init__(self, stall_s: float, clock: Callable[[], float]) -> None:
        self.stall_s = stall_s
        self.clock = clock
        self._stuck: dict[Hashable, _Stuck] = {}

    def observe(
        self, tp: Hashable, position: int | None, highwater: int | None, busy: bool
    ) -> Remedy | None:
        """``busy``: the partition is not meant to be read now (paused, or its bucket has
        work in flight or waiting); that resets its timer."""
        now = self.clock()
        if busy or position is None or highwater is None or position >= highwater:
            self._stuck.pop(tp, None)  # nothing to read, or not meant to read it now
            return None
        stuck = self._stuck.get(tp)
        if stuck is None or stuck.position != position:
            self._stuck[tp] = _Stuck(position, now)
            return None
        if now - stuck.since < self.stall_s:
            return None
        stuck.since = now
        if not stuck.sought:
            stuck.sought = True
            return Remedy.seek
        self._stuck.clear()  # a new consumer starts over
        return Remedy.renew

    def forget(self) -> None:
        self._stuck.clear()
