"""Requests a client produced and has had no reply for: produced again after
``client_resend_after_s`` (the same request id, so the pipeline answers it once), up to
``client_max_resends`` times. Against tansu only, which has lost acknowledged records; a
resend keeps the request's lane and trace context."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from headrace.schemas.messages import Request

log = logging.getLogger(__name__)

CHECK_S = 0.5
Key = tuple[str, str]  # (tenant, request_id)


@dataclass
class Unanswered:
    request: Request
    sent_at: float
    resends: int = 0
    traceparent: str | None = None


class Resender:
    def __init__(
        self,
        after_s: float,
        max_resends: int,
        produce: Callable[[Unanswered], None],
        flush: Callable[[], None],
    ) -> None:
        self.after_s = after_s
        self.max_resends = max_resends
        self._produce = produce
        self._flush = flush
        self._unanswered: dict[Key, Unanswered] = {}
        self._lock = threading.Lock()
        self.resent = 0
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="resend", daemon=True)
        self._thread.start()

    def sent(self, key: Key, entry: Unanswered) -> None:
        with self._lock:
            self._unanswered[key] = entry

    def answered(self, key: Key) -> None:
        with self._lock:
            self._unanswered.pop(key, None)

    def close(self) -> None:
        self._closing.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._closing.wait(CHECK_S):
            now = time.monotonic()
            with self._lock:
                due = [
                    u
                    for u in self._unanswered.values()
                    if now - u.sent_at >= self.after_s and u.resends < self.max_resends
                ]
                for u in due:
                    u.sent_at, u.resends = now, u.resends + 1
            if not due:
                continue
            try:
                for u in due:
                    self._produce(u)
                self._flush()
                self.resent += len(due)
                log.warning(
                    "%d requests unanswered after %.0fs: sent again", len(due), self.after_s
                )
            except Exception:  # the broker is away: the next pass tries again
                log.warning("resending %d requests failed", len(due), exc_info=True)
