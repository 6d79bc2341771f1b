"""A watch on the worker's model: a forward pass that has not ended after ``worker_stall_s``
(and none other ended meanwhile) is a stall, and a stalled worker ends itself.

Why end it: a model that stopped moving (a hung kernel, a deadlocked decode loop) holds its
batch's claims while the worker's heartbeat goes on, so the dispatcher sees a live worker on
the batch and waits out its leases (three of them) before it sends the batch elsewhere, and a
second attempt defers to the live claims meanwhile; nothing in the process can unstick a
kernel. Ended, the worker stops beating: the dispatcher settles its batch and sends it to
another worker at once (``dispatcher.recovery``), which takes the dead worker's claims, and a
supervisor (compose, k8s, ``Pipeline(supervise=True)``) starts a fresh one. Before it exits,
the worker logs every thread's stack (where the model stood) and retires from the live set.

``StallWatch`` is the policy (an injected clock, no threads); ``StallWatcher`` runs it.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

from headrace.workers.periodic import Periodic

log = logging.getLogger(__name__)

STALL_EXIT_CODE = 87


class StallWatch:
    def __init__(self, clock: Callable[[], float], stall_s: float) -> None:
        self.clock = clock
        self.stall_s = stall_s
        self._ended = -1
        self._since = clock()  # when a pass last ended, or none ran

    def check(self, running: int, ended: int) -> float | None:
        """``running``: forward passes under way; ``ended``: forward passes ended so far
        (``Pulse.read``). Seconds the model has been in a pass without one ending, once that
        reaches ``stall_s``."""
        now = self.clock()
        if running == 0 or ended != self._ended:
            self._ended, self._since = ended, now
            return None
        still = now - self._since
        return still if still >= self.stall_s else None


def thread_stacks() -> str:
    """Every thread's stack, named."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return "\n".join(
        f"--- thread {names.get(ident, ident)}\n{''.join(traceback.format_stack(frame))}"
        for ident, frame in sys._current_frames().items()
    )


class StallWatcher(Periodic):
    """Reads ``read`` (a backend's ``Pulse.read``) every ``every_s`` on a daemon thread; at a
    stall, logs every thread's stack, calls ``before_exit`` (retire from the live set) and
    ends the process with ``STALL_EXIT_CODE``."""

    def __init__(
        self,
        watch: StallWatch,
        read: Callable[[], tuple[int, int]],
        before_exit: Callable[[], None],
        every_s: float = 1.0,
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        super().__init__("stall-watch", every_s)
        self.watch = watch
        self.read = read
        self.before_exit = before_exit
        self._exit = exit

    def tick(self) -> bool:
        stalled = self.watch.check(*self.read())
        if stalled is None:
            return False
        log.error(
            "the model has been in a forward pass for %.1fs without one ending "
            "(worker_stall_s %.1f): exiting (code %d) so its batch goes to another "
            "worker now. Where every thread stands:\n%s",
            stalled,
            self.watch.stall_s,
            STALL_EXIT_CODE,
            thread_stacks(),
        )
        try:
            self.before_exit()
        except Exception:  # leaving anyway: the heartbeat stops with the process
            log.warning("could not retire before exiting", exc_info=True)
        for handler in logging.getLogger().handlers:
            handler.flush()
        self._exit(STALL_EXIT_CODE)
        return True


def watch_model(
    backend: object, stall_s: float | None, before_exit: Callable[[], None]
) -> StallWatcher | None:
    """A running watch on ``backend``'s pulse; None when it has none (vLLM's engine, the
    echo backend) or the watch is off (``stall_s`` None)."""
    pulse = getattr(backend, "pulse", None)
    if stall_s is None or pulse is None:
        log.info("no stall watch on this worker's model")
        return None
    return StallWatcher(StallWatch(time.monotonic, stall_s), pulse.read, before_exit).start()
