"""What the continuous decoder (``continuous.py``) keeps for a caller and for a running row:
a caller's rows (``DecodeJob``) and the channel their deltas and ends go back on, which the
caller's thread waits on (``DecodeJob.wait``); a running row's next token and position
(``LiveRow``); the rows waiting to join, in class order (``WaitingRows``)."""

from __future__ import annotations

import queue
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from headrace.workers.backends.base import Generated, OnFinished

OnDelta = Callable[[int, str], None]  # (row, text)


@dataclass(eq=False)
class DecodeJob:
    """One caller's rows: what it asked, and the channel its deltas and its end go back on."""

    prompts: list[list[int]]
    rows: list[Any]  # rows.DecodeRow, one per prompt
    ranks: list[int] = field(default_factory=list)  # each row's class, 0 first
    # (row, text): a delta; (row, None): the row finished; None: every row finished
    events: queue.SimpleQueue[tuple[int, str | None] | None] = field(
        default_factory=queue.SimpleQueue
    )
    cancelled: frozenset[int] = frozenset()  # set by the caller's thread, read by the loop
    streams: bool = True  # whether the caller takes deltas
    left: int = 0  # rows not finished
    error: BaseException | None = None

    def finished(self, index: int) -> None:
        """The loop's side: row ``index`` finished (and, with it, maybe the job)."""
        self.events.put((index, None))
        self.left -= 1
        if self.left == 0:
            self.events.put(None)

    def wait(
        self,
        on_delta: OnDelta | None,
        cancelled: Callable[[], set[int]] | None,
        on_finished: OnFinished | None,
        cancel_check_s: float,
    ) -> list[Generated]:
        """The caller's side, on its thread: deltas, rows as they finish (those that
        finished by the same step together) and cancellation checks until every row ended;
        raises what failed the job's rows."""
        checked = time.monotonic()
        ended = False
        while not ended:
            wait = None if cancelled is None else cancel_check_s
            finished: list[int] = []
            try:
                events = [self.events.get(timeout=wait)]
                while not self.events.empty():
                    events.append(self.events.get())
            except queue.Empty:
                events = []  # time to ask which rows were cancelled
            if cancelled is not None and time.monotonic() - checked >= cancel_check_s:
                checked = time.monotonic()
                self.cancelled = frozenset(cancelled())
            for event in events:
                if event is None:
                    ended = True
                elif event[1] is None:
                    finished.append(event[0])
                elif on_delta is not None:
                    on_delta(event[0], event[1])
            if finished and on_finished is not None and self.error is None:
                on_finished([(i, generated(self.rows[i])) for i in finished])
        if self.error is not None:
            raise self.error
        return [generated(row) for row in self.rows]


@dataclass(eq=False)
class LiveRow:
    """A row in the running batch: the token it feeds next, at which position."""

    job: DecodeJob
    index: int
    position: int
    token: int = 0
    row: Any = None  # job.rows[index], held here: the loop reads it for every row each step

    def __post_init__(self) -> None:
        self.row = self.job.rows[self.index]

    def emit(self) -> None:
        """The row's text since the last delta, to its caller (where the caller streams)."""
        if not self.job.streams:
            return
        delta = self.row.pending_delta()
        if delta:
            self.job.events.put((self.index, delta))


def rank(entry: tuple[DecodeJob, int]) -> int:
    """A waiting row's class (0 first; 1 where its caller gave none)."""
    job, index = entry
    return job.ranks[index] if job.ranks else 1


def context_of(job: DecodeJob, index: int) -> list[int]:
    """What a row's prefill reads: its prompt, and the tokens it has so far when it resumes
    after giving its place up (none for a new row)."""
    ids: list[int] = job.rows[index].ids
    return job.prompts[index] + ids if ids else job.prompts[index]


def generated(row: Any) -> Generated:
    """A finished row as the backend returns it."""
    return Generated(
        row.text,
        row.ids,
        row.finish or "length",
        row.prompt_tokens,
        row.device_s * 1000,
        row.logprobs,
    )


class WaitingRows(deque[tuple[DecodeJob, int]]):
    """Rows waiting to join the loop, best class first."""

    def enqueue(self, entries: list[tuple[DecodeJob, int]], resumed: bool = False) -> None:
        """A new row after every row of its class or a better one, a resumed row before the
        others of its class (it came first)."""
        for entry in entries:
            its = rank(entry)
            last = self[-1] if self else None
            if not resumed and (last is None or rank(last) <= its):
                self.append(entry)  # the usual case: one class
                continue
            at = next(
                (
                    k
                    for k, waiting in enumerate(self)
                    if rank(waiting) > its or (resumed and rank(waiting) == its)
                ),
                len(self),
            )
            self.insert(at, entry)
