"""Which running requests were cancelled, asked of Redis once for a whole worker process.

A generation stops a cancelled row early, so a running batch asks which of its rows were
cancelled every ``cancel_check_s``. A worker that batches continuously holds up to
``generation_slots`` batches at once, and a batch with a 256-token row runs for seconds:
each batch asking on its own was 64 threads making five Redis round trips a second, the
largest part of what the worker's batch threads cost (a thread-by-thread CPU count under
load). Here one thread asks for every watched request in one ``MGET`` per interval, and a
batch reads the answer from memory.

A cancel is seen at most one interval (plus one Redis round trip) after it was made, as
before. Redis away: the last answer stands and the watch asks again next interval.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (tenant, request id)


class Watched:
    """One batch's rows: ``cancelled()`` gives the rows (indexes into its keys) cancelled as
    of the watch's last look; ``close()`` stops watching them."""

    def __init__(self, watch: CancelWatch, ident: int, keys: Sequence[Key]) -> None:
        self._watch, self._ident, self.keys = watch, ident, list(keys)
        self.rows: frozenset[int] = frozenset()  # set by the watch's thread

    def cancelled(self) -> set[int]:
        return set(self.rows)

    def close(self) -> None:
        self._watch.forget(self._ident)


class CancelWatch:
    """``lookup(keys)``: which of ``keys`` are cancelled (``Ledger.cancelled``), called from
    the watch's own thread every ``interval_s`` while anything is watched."""

    def __init__(self, lookup: Callable[[list[Key]], list[bool]], interval_s: float = 0.2) -> None:
        self._lookup = lookup
        self.interval_s = interval_s
        self._watched: dict[int, Watched] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.looks = 0  # lookups made (for tests and metrics)
        self._thread = threading.Thread(target=self._run, name="cancel-watch", daemon=True)
        self._thread.start()

    def watch(self, keys: Sequence[Key]) -> Watched:
        with self._lock:
            ident = next(self._ids)
            watched = self._watched[ident] = Watched(self, ident, keys)
        return watched

    def forget(self, ident: int) -> None:
        with self._lock:
            self._watched.pop(ident, None)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def look(self) -> None:
        """Ask once for every watched request (what the thread does each interval)."""
        with self._lock:
            watched = list(self._watched.values())
        keys = [key for w in watched for key in w.keys]
        if not keys:
            return
        try:
            answers = self._lookup(keys)
        except Exception:  # Redis away: the last answer stands; ask again next interval
            log.warning("could not look up cancellations", exc_info=True)
            return
        self.looks += 1
        at = 0
        for w in watched:
            flags = answers[at : at + len(w.keys)]
            at += len(w.keys)
            w.rows = frozenset(row for row, flag in enumerate(flags) if flag)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.look()
