"""Keeping a local pipeline's workers running: a worker that ends on its own (a loading stage
past its limit, a checksum refusal, a crash) is started again after a backoff that doubles
with each failure in a row and starts over once a run has lasted ``healthy_s``. In
production the orchestrator does this (Kubernetes' CrashLoopBackOff, compose's ``restart:``);
``Pipeline(supervise=True)`` does it for the demo, the benchmarks and the tests.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

log = logging.getLogger(__name__)


@dataclass
class Backoff:
    """The delay before the next start (pure; the caller says when runs start and end)."""

    base_s: float = 1.0
    max_s: float = 30.0
    healthy_s: float = 60.0
    failures: int = 0

    def ended(self, ran_s: float) -> float:
        """A run of ``ran_s`` ended: how long to wait before starting again."""
        self.failures = 1 if ran_s >= self.healthy_s else self.failures + 1
        return float(min(self.max_s, self.base_s * 2.0 ** (self.failures - 1)))


class Supervised(Protocol):
    name: str

    def alive(self) -> bool: ...

    def start(self, ready_timeout_s: float = ...) -> object: ...

    def exit_code(self) -> int | None: ...


@dataclass(frozen=True)
class Restart:
    name: str
    exit_code: int | None
    ran_s: float
    delay_s: float
    at: float


@dataclass
class Supervisor:
    """Watches ``procs`` on a thread of its own; ``restarts`` records each restart."""

    procs: Sequence[Supervised]
    backoff: Callable[[], Backoff] = Backoff
    poll_s: float = 0.2
    ready_timeout_s: float = 120.0
    restarts: list[Restart] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Supervisor:
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _watch(self) -> None:
        backoffs: dict[int, Backoff] = {}
        started: dict[int, float] = {}
        while not self._stop.wait(self.poll_s):
            for proc in list(self.procs):  # workers added later are watched too
                backoffs.setdefault(id(proc), self.backoff())
                if proc.alive():
                    started.setdefault(id(proc), time.monotonic())
                    continue
                code = proc.exit_code()
                if code is None or self._stop.is_set():
                    continue  # not launched yet (a worker is listed before it is launched)
                ran_s = time.monotonic() - started.get(id(proc), time.monotonic())
                delay = backoffs[id(proc)].ended(ran_s)
                self.restarts.append(Restart(proc.name, code, ran_s, delay, time.time()))
                log.warning(
                    "%s ended (exit %s) after %.1fs; starting it again in %.1fs",
                    proc.name,
                    code,
                    ran_s,
                    delay,
                )
                if self._stop.wait(delay):
                    return
                started[id(proc)] = time.monotonic()
                try:
                    proc.start(self.ready_timeout_s)
                except Exception as exc:  # it ended again before it was ready
                    log.warning("%s did not start: %s", proc.name, exc)
