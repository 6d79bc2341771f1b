"""A watch on the dispatcher's own loop: a pass that has not ended for ``stall_s`` is a stall.

Seen (shared/evidence/generation-hang-2026-12-04): a dispatcher whose loop ran only when a
record arrived, about once a minute, for ten minutes. Its state log, due every 10 s while
anything was unanswered, came once a minute; leases were not checked and completions not read
meanwhile, so six requests waited with a batch "in flight" until their client gave up. Where
the loop stood was not known. Now a thread watches the loop: at a stall it logs where the
loop's thread is (its stack) and wakes the broker client (a poll blocked on the network
returns), once per stall and then every ``repeat_s`` while it lasts; the metric
``headrace_dispatcher_loop_stalls_total`` counts them.

A stall the nudge does not end is bounded too: once one pass has run ``exit_s``
(``dispatcher_stall_exit_s``, 120 s) the dispatcher logs every thread's stack and exits with
``STALL_EXIT_CODE``, so that its supervisor (compose, k8s) starts a fresh one and the group
gives its partitions to a live member: their requests are read again from the committed
offset and the ledger answers each once. A hung dispatcher costs at most that long, not an
outage. Test: ``tests/faults/test_stalled_dispatcher.py``.

``LoopWatch`` is the policy (an injected clock, no threads); ``LoopWatcher`` runs it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable

from prometheus_client import Counter

from headrace.workers.periodic import Periodic
from headrace.workers.stall_watch import STALL_EXIT_CODE, thread_stacks

log = logging.getLogger(__name__)

STALL_S = 5.0  # a pass normally ends within ~100 ms (the longest poll wait)
REPEAT_S = 30.0

STALLS = Counter(
    "headrace_dispatcher_loop_stalls", "Passes of the dispatcher's loop that ran past STALL_S"
)


class LoopWatch:
    def __init__(
        self,
        clock: Callable[[], float],
        stall_s: float = STALL_S,
        repeat_s: float = REPEAT_S,
        exit_s: float | None = None,
    ) -> None:
        """``exit_s``: a pass this long ends the process (None: never)."""
        self.clock = clock
        self.stall_s = stall_s
        self.repeat_s = repeat_s
        self.exit_s = exit_s
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
        if self.fatal(running):
            return running
        if running < self.stall_s:
            return None
        if self._said is not None and now - self._said < self.repeat_s:
            return None
        self._said = now
        return running

    def fatal(self, running: float) -> bool:
        """A pass that has run ``running`` seconds ends the process."""
        return self.exit_s is not None and running >= self.exit_s


class LoopWatcher(Periodic):
    """Checks ``watch`` every ``every_s`` on a daemon thread; on a stall, logs the stack of
    ``thread`` (the loop's) and calls ``wake``; past the watch's ``exit_s``, logs every
    thread's stack and calls ``exit`` with ``STALL_EXIT_CODE``."""

    def __init__(
        self,
        watch: LoopWatch,
        thread: threading.Thread,
        wake: Callable[[], None],
        every_s: float = 1.0,
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        super().__init__("loop-watch", every_s)
        self.watch = watch
        self.loop_thread = thread
        self.wake = wake
        self._exit = exit

    def tick(self) -> bool:
        running = self.watch.due()
        if running is None:
            return False
        STALLS.inc()
        if self.watch.fatal(running):
            log.error(
                "dispatcher loop: a pass has run %.1fs (dispatcher_stall_exit_s %.0f): exiting "
                "(code %d) so that a fresh dispatcher takes its partitions; every thread:\n%s",
                running,
                self.watch.exit_s,
                STALL_EXIT_CODE,
                thread_stacks(),
            )
            self._exit(STALL_EXIT_CODE)
            return True
        frame = sys._current_frames().get(self.loop_thread.ident or -1)
        where = "".join(traceback.format_stack(frame)) if frame is not None else "?"
        log.warning("dispatcher loop: a pass has run %.1fs; it is at\n%s", running, where)
        try:
            self.wake()
        except Exception:  # a wake-up is a nudge; the watch goes on
            log.warning("could not wake the broker client", exc_info=True)
        return False
