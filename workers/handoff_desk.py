"""The worker's hand-off thread (``handoff``): while no Celery task runs, the worker is
idle in Redis and waits on its inbox; a batch handed over runs on this thread, taking turns
at the model with Celery's (``BatchContext.model_turn``).

Celery's tasks say when they start and end (``task_started`` / ``task_ended``): a task that
starts takes the token away at once, so a dispatcher hands the worker nothing more while it
computes (one handed over in that instant waits for the model, as a prefetched task would).
"""

from __future__ import annotations

import logging
import threading
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
        run: Callable[[Entry], None],
        give_back: Callable[[Entry], None],
        wait_s: float = WAIT_S,
        prepare: Callable[[], object] = lambda: None,
    ) -> None:
        """``run``: compute a batch handed over (on the desk's thread; it answers its own
        errors); ``give_back``: send one left in the inbox at the end by Celery;
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
        self._lock = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="handoff", daemon=True)

    def start(self) -> Desk:
        self._thread.start()
        return self

    def task_started(self) -> None:
        with self._lock:
            self._tasks += 1
            try:
                self.inbox.busy()
            except REDIS_ERRORS:  # the token runs out by itself
                log.debug("hand-off token not taken back", exc_info=True)

    def task_ended(self) -> None:
        """Idle again at once when the last task ends and nothing handed over computes: the
        desk may still be in its wait on the inbox (up to ``wait_s``), which takes a batch
        handed over now as soon as it comes. Lone requests a few ms apart each went by
        Celery while the worker waited out that wait without a token."""
        with self._lock:
            self._tasks -= 1
            if not self._tasks and not self._computing and not self._stop.is_set():
                try:
                    self.inbox.ready(TOKEN_MS)
                except REDIS_ERRORS:  # the desk's own wait sets it again
                    log.debug("hand-off token not set again", exc_info=True)
            self._lock.notify_all()

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
            with self._lock:
                self._computing = True
            try:
                self.run(entry)
            except Exception:  # the batch's requests are the dispatcher's to send again
                log.exception("a batch handed over failed")
            finally:
                with self._lock:
                    self._computing = False

    def _wait(self) -> Entry | None:
        """Idle once no task runs, then the next batch handed over (None: none came)."""
        with self._lock:
            while self._tasks and not self._stop.is_set():
                self._lock.wait(self.wait_s)
            if self._stop.is_set():
                return None
            self.inbox.ready(TOKEN_MS)  # under the lock: a task starting now takes it back
        return self.inbox.take(self.wait_s)
