"""The worker's hand-off thread (``handoff``): while no Celery task runs, the worker is
idle in Redis and waits on its inbox; a batch handed over runs on this thread, taking turns
at the model with Celery's (``BatchContext.model_turn``).

Celery's tasks say when they start (``task_started``, which takes the token away at once, so a
dispatcher hands the worker nothing more while it computes; one handed over in that instant
waits for the model, as a prefetched task would) and when they are done with the model (the
end it returns). A batch is done once its last replies are on their way to the broker, while
it acknowledges them and before the ledger hears of them and the metrics count them
(``BatchContext.replies_sent``): a requester answered then may send its next request at once,
and it finds the worker idle, not busy with the bookkeeping of the batch before (lone
requests one after another each went by Celery about one time in ten on a loaded machine,
and one in ten still, under load, while the worker waited for the acknowledgement first).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from headrace.connections import REDIS_ERRORS
from headrace.workers.handoff import TOKEN_MS, Entry, Inbox

log = logging.getLogger(__name__)

WAIT_S = 0.5  # one wait on the inbox; the token is set again after each (TOKEN_MS covers 4)
RETRY_S = 1.0  # Redis away: try again this much later


class Desk:
    def __init__(
        self,
        inbox: Inbox,
        run: Callable[[Entry, Callable[[], None]], None],
        give_back: Callable[[Entry], None],
        wait_s: float = WAIT_S,
        prepare: Callable[[], object] = lambda: None,
    ) -> None:
        """``run``: compute a batch handed over (on the desk's thread; it answers its own
        errors) and call the function it is given once the batch's replies are on their way (the
        worker is idle from then); ``give_back``: send one left in the inbox at the end by Celery;
        ``prepare``: called on the desk's thread before it first says it is idle (what the
        first batch handed over would otherwise wait for: its reply sink's connection)."""
        self.inbox = inbox
        self.prepare = prepare
        self.run = run
        self.give_back = give_back
        self.wait_s = wait_s
        self.handled = 0
        self._tasks = 0  # Celery tasks running
        self._computing = False  # a batch handed over runs on the desk's thread
        self._token_at: float | None = None  # when this desk last set its token (monotonic)
        self.idle = threading.Event()  # set once the desk has first said it is idle
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="handoff", daemon=True)

    def start(self) -> Desk:
        self._thread.start()
        return self

    def task_started(self) -> Callable[[], None]:
        """A Celery task starts: not idle until it ends. Returns its end, to call once its
        replies are delivered and again when it returns (the second call does nothing)."""
        with self._lock:
            self._tasks += 1
            self._token_at = None
            try:
                self.inbox.busy()
            except REDIS_ERRORS:  # the token runs out by itself
                log.debug("hand-off token not taken back", exc_info=True)
        ended = False

        def end() -> None:
            nonlocal ended
            with self._lock:
                if ended:
                    return
                ended = True
                self._tasks -= 1
                self._idle_if_free()
                self._lock.notify_all()

        return end

    def _idle_if_free(self) -> None:
        """Idle again at once when no task runs and nothing handed over computes (called
        under the lock): the desk may still be in its wait on the inbox (up to ``wait_s``),
        which takes a batch handed over now as soon as it comes. Lone requests a few ms apart
        each went by Celery while the worker waited out that wait without a token."""
        if self._tasks or self._computing or self._stop.is_set():
            return
        try:
            self._ready()
        except REDIS_ERRORS:  # the desk's own wait sets it again
            log.debug("hand-off token not set again", exc_info=True)

    def _ready(self) -> None:
        self.inbox.ready(TOKEN_MS)
        self._token_at = time.monotonic()
        self.idle.set()

    def _token_fresh(self) -> bool:
        """The token this desk set is young enough to outlive the next wait: not set again.
        (Set again, it could come back after an offer took it, and a second batch would
        be handed to a worker that is about to compute the first.)"""
        at = self._token_at
        return at is not None and time.monotonic() - at < TOKEN_MS / 2000 - self.wait_s

    def close(self) -> None:
        """Stop waiting, leave the indexes, send what the inbox holds by Celery."""
        self._stop.set()
        with self._lock:
            self._lock.notify_all()
        self._thread.join(timeout=self.wait_s + 5)
        for entry in self.inbox.leave():
            self.give_back(entry)

    def _loop(self) -> None:
        try:
            self.prepare()
        except Exception:  # the first batch prepares it, then
            log.warning("hand-off desk not prepared", exc_info=True)
        while not self._stop.is_set():
            try:
                entry = self._wait()
            except REDIS_ERRORS:
                log.warning("hand-off inbox unreachable; again in %.0f s", RETRY_S, exc_info=True)
                self._stop.wait(RETRY_S)
                continue
            if entry is None:
                continue
            self.handled += 1
            try:
                self.run(entry, self._handed_done)
            except Exception:  # the batch's requests are the dispatcher's to send again
                log.exception("a batch handed over failed")
            finally:
                with self._lock:
                    self._computing = False

    def _handed_done(self) -> None:
        """The batch handed over has sent its replies: idle while it finishes."""
        with self._lock:
            if self._computing:
                self._computing = False
                self._idle_if_free()

    def _wait(self) -> Entry | None:
        """Idle once no task runs, then the next batch handed over (None: none came)."""
        with self._lock:
            while self._tasks and not self._stop.is_set():
                self._lock.wait(self.wait_s)
            if self._stop.is_set():
                return None
            if not self._token_fresh():
                self._ready()  # under the lock: a task starting now takes it back
        entry = self.inbox.take(self.wait_s)
        if entry is not None:
            with self._lock:  # an offer took the token
                self._token_at = None
                self._computing = True
        return entry
