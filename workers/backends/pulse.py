"""How a backend shows that its model is moving: forward passes under way, and forward
passes ended (a batch embedded, a prefill, a decode step).

A backend holds one ``Pulse`` and runs each forward pass under ``forward()``; the worker's
stall watch (``workers.stall_watch``) reads it. A forward pass that does not end is a model
that stopped moving (a hung kernel, a deadlocked collective), not a slow one: every pass of a
model that serves ends in milliseconds to seconds. Only the pass itself counts: a caller
blocked elsewhere (delivering replies while the broker is away) is not a stalled model.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Pulse:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running = 0
        self._ended = 0

    @contextmanager
    def forward(self) -> Iterator[None]:
        """Around one forward pass (several may run at once, on their own threads)."""
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                self._ended += 1

    def read(self) -> tuple[int, int]:
        """(forward passes under way, forward passes ended so far)."""
        with self._lock:
            return self._running, self._ended
