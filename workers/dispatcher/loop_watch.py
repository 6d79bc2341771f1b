"""A watch on the dispatcher's own loop: a pass that has not ended for ``stall_s`` is a stall.

Seen (shared/evidence/generation-hang-2026-12-04): a dispatcher whose loop ran only when a
record arrived, about once a minute, for ten minutes. Its state log, due every 10 s while
anything was unanswered, came once a minute; leases were not checked and completions not read
meanwhile, so six requests waited with a batch "in flight" until their client gave up. Where
the loop stood was not known. Now a thread watches the loop: at a stall it logs where the
loop's thread is (its stack) and wakes the broker client (a poll blocked on the network
returns), once per stall and then every ``repeat_s`` while it lasts; the metric
``headrace_dispatcher_loop_stalls_total`` counts them.

``LoopWatch`` is the policy (an injected clock, no threads); ``LoopWatcher`` runs it.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable

from prometheus_client import Counter

from headrace.workers.periodic import Periodic

log = logging.getLogger(__name__)

STALL_S = 5.0  # a pass normally ends within ~100 ms (the longest poll wait)
REPEAT_S = 30.0

STALLS = Counter(
    "headrace_dispatcher_loop_stalls", "Passes of the dispatcher's loop that ran past STALL_S"
)


class LoopWatch:
    def __init__(
        self, clock: Callable[[], float], stall_s: float = STALL_S, repeat_s: float = REPEAT_S
    ) -> None:
        self.clock = clock
        self.stall_s = stall_s
        self.repeat_s = repeat_s
        self._beat = clock()
        self._said: float | None = None  # when this stall was last reported

    def beat(self) -> None:
        """A pass ended."""
        self._beat = self.clock()
        self._said = None

    def due(self) -> float | None:
        """Seconds the current pass has run, when a stall is due to be reported now."""
        now = self.clock()
        running = now - self._beat
        if running < self.stall_s:
            return None
        if self._said is not None and now - self._said < self.repeat_s:
            return None
        self._said = now
        return running


class LoopWatcher(Periodic):
    """Checks ``watch`` every ``every_s`` on a daemon thread; on a stall, logs the stack of
    ``thread`` (the loop's) and calls ``wake``."""

    def __init__(
        self,
        watch: LoopWatch,
        thread: threading.Thread,
        wake: Callable[[], None],
        every_s: float = 1.0,
    ) -> None:
        super().__init__("loop-watch", every_s)
        self.watch = watch
        self.loop_thread = thread
        self.wake = wake

    def tick(self) -> bool:
        running = self.watch.due()
        if running is None:
            return False
        STALLS.inc()
        frame = sys._current_frames().get(self.loop_thread.ident or -1)
        where = "".join(traceback.format_stack(frame)) if frame is not None else "?"
        log.warning("dispatcher loop: a pass has run %.1fs; it is at\n%s", running, where)
        try:
            self.wake()
        except Exception:  # a wake-up is a nudge; the watch goes on
            log.warning("could not wake the broker client", exc_info=True)
        return False
