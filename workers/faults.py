"""Fault injection for tests and drills: a backend wrapper that fails on marked inputs.

Enabled only by the ``fault_poison_marker`` / ``fault_crash_marker`` / ``fault_slow_marker``
/ ``fault_stall_marker`` settings. It wraps any backend, embedding or generation: an input
that contains the poison marker makes the model raise for any batch holding it (so bisection
has to isolate it); one that contains the crash marker kills the worker process mid-batch,
after its requests were claimed, the way a segfault or the OOM killer would; one with the slow
marker holds its batch for a while (to cancel or time out something that is running); one
with the stall marker never ends its batch, the model at work and not moving, the way a hung
kernel or a deadlocked decode loop would (the worker's stall watch ends such a worker).

The dispatcher's injected stall is ``workers.dispatcher.io.stall`` (it imports no model code).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any, cast

from headrace.workers.backends.base import (
    Backend,
    EncodedItem,
    Generated,
    GenerativeBackend,
    LoadTimings,
    ModelBackend,
    OnFinished,
    Sampling,
    Shape,
    Vectors,
)
from headrace.workers.backends.pulse import Pulse

log = logging.getLogger(__name__)

CRASH_EXIT_CODE = 86


class InjectedFault(RuntimeError):
    pass


class FaultyBackend:
    def __init__(
        self,
        inner: ModelBackend,
        poison: str | None = None,
        crash: str | None = None,
        slow: str | None = None,
        slow_s: float = 3.0,
        stall: str | None = None,
    ) -> None:
        self.inner = inner
        self.poison = poison
        self.crash = crash
        self.slow = slow
        self.slow_s = slow_s
        self.stall = stall
        self._poisoned: set[int] = set()
        self._crashing: set[int] = set()
        self._slow: set[int] = set()
        self._stalling: set[int] = set()
        self._never = threading.Event()  # what a stalled batch waits for

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def task(self) -> str:
        return self.inner.task

    @property
    def max_tokens(self) -> int:
        return self.inner.max_tokens

    @property
    def continuous(self) -> bool:
        return bool(getattr(self.inner, "continuous", False))

    @property
    def timings(self) -> LoadTimings:
        return self.inner.timings

    @property
    def decoder(self) -> Any:
        """The continuous decode loop of the backend inside, if it has one."""
        return getattr(self.inner, "decoder", None)

    @property
    def graphs(self) -> Any:
        """The decode steps' CUDA graphs of the backend inside, if it replays them."""
        return getattr(self.inner, "graphs", None)

    @property
    def pulse(self) -> Pulse | None:
        pulse: Pulse | None = getattr(self.inner, "pulse", None)
        return pulse

    def load_weights(self) -> None:
        self.inner.load_weights()

    def build(self) -> None:
        self.inner.build()

    def warm_up(self, shapes: Sequence[Shape]) -> None:
        self.inner.warm_up(shapes)

    def encode(self, texts: list[str], truncate: list[bool]) -> list[EncodedItem]:
        items = self.inner.encode(texts, truncate)
        self._poisoned = {id(i) for t, i in zip(texts, items, strict=True) if _has(t, self.poison)}
        self._crashing = {id(i) for t, i in zip(texts, items, strict=True) if _has(t, self.crash)}
        self._slow = {id(i) for t, i in zip(texts, items, strict=True) if _has(t, self.slow)}
        self._stalling = {id(i) for t, i in zip(texts, items, strict=True) if _has(t, self.stall)}
        return items

    def encode_ids(self, rows: list[list[int]], truncate: list[bool]) -> list[EncodedItem]:
        return cast(Backend, self.inner).encode_ids(rows, truncate)

    @property
    def vocab_size(self) -> int:
        return cast(Backend, self.inner).vocab_size

    def embed(self, items: list[EncodedItem], normalize: list[bool]) -> tuple[Vectors, int, int]:
        self._inject(items)
        return cast(Backend, self.inner).embed(items, normalize)

    def token_pieces(self, ids: list[int]) -> list[tuple[str, list[int]]]:
        inner: Any = self.inner  # a generative backend names its tokens
        return list(inner.token_pieces(ids))

    def generate(
        self,
        items: list[EncodedItem],
        params: Sequence[Sampling],
        on_delta: Callable[[int, str], None] | None = None,
        cancelled: Callable[[], set[int]] | None = None,
        on_finished: OnFinished | None = None,
    ) -> list[Generated]:
        self._inject(items)
        inner = cast(GenerativeBackend, self.inner)
        return inner.generate(items, params, on_delta, cancelled, on_finished)

    def _inject(self, items: list[EncodedItem]) -> None:
        if any(id(i) in self._crashing for i in items):
            log.error("injected crash: exiting mid-batch")
            os._exit(CRASH_EXIT_CODE)
        if any(id(i) in self._poisoned for i in items):
            raise InjectedFault("injected poison input")
        if any(id(i) in self._slow for i in items):
            time.sleep(self.slow_s)
        if any(id(i) in self._stalling for i in items):
            log.error("injected stall: this batch's model never moves again")
            pulse = self.pulse
            with pulse.forward() if pulse is not None else nullcontext():
                self._never.wait()


def _has(text: str, marker: str | None) -> bool:
    return marker is not None and marker in text
