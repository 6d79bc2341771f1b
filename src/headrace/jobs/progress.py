"""A bulk job's progress while it runs: which lines are answered (a bitmap, one byte a
line), the completed and failed counts, and the submission window (lines in the air)."""

from __future__ import annotations

import json
import threading

from headrace.jobs.bulk_metrics import line_answered
from headrace.jobs.files import Spool
from headrace.jobs.formats import line_of
from headrace.jobs.store import Counts


class Progress:
    """Which lines are answered (a bitmap), counts, and the submission window."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.answered = bytearray(total + 1)
        self.completed = 0
        self.failed = 0
        self.input_tokens = 0
        self.output_tokens = 0
        self.lock = threading.Lock()
        self._room = threading.Condition(self.lock)
        self._in_air: set[int] = set()
        self._all_submitted = False
        self.submit_error: Exception | None = None
        self.submitted_count = 0

    def mark_from_output(self, output_line: str, failed: bool) -> None:
        """A line the spools hold already (a resumed run), with its token usage."""
        try:
            out = json.loads(output_line)
            line = line_of(out["id"])
            usage = ((out.get("response") or {}).get("body") or {}).get("usage") or {}
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        if line is not None and 1 <= line <= self.total and not self.answered[line]:
            self.answered[line] = 1
            if failed:
                self.failed += 1
            else:
                self.completed += 1
            line_answered(failed)
            self.input_tokens += int(usage.get("prompt_tokens", 0))
            self.output_tokens += int(usage.get("completion_tokens", 0))

    def is_answered(self, line: int) -> bool:
        return bool(self.answered[line]) if 0 <= line <= self.total else True

    def answer(
        self, line: int, output: str, spool: Spool, failed: bool, tokens: tuple[int, int] = (0, 0)
    ) -> bool:
        """Record ``line``'s answer; False if it had one already (nothing is written)."""
        with self.lock:
            if self.answered[line]:
                return False
            spool.append(output)  # first: a line the disk refused stays unanswered
            self.answered[line] = 1
            self.input_tokens += tokens[0]
            self.output_tokens += tokens[1]
            if failed:
                self.failed += 1
            else:
                self.completed += 1
            line_answered(failed)
            self._in_air.discard(line)
            self._room.notify_all()
            return True

    def has_room(self, window: int) -> bool:
        with self.lock:
            return len(self._in_air) < window

    def wait_for_room(self, window: int, stop: threading.Event) -> bool:
        with self._room:
            while len(self._in_air) >= window:
                if stop.is_set():
                    return False
                self._room.wait(0.2)
        return not stop.is_set()

    def submitted(self, line: int) -> None:
        with self.lock:
            self.submitted_count += 1
            if not self.answered[line]:
                self._in_air.add(line)

    def all_submitted(self) -> None:
        with self.lock:
            self._all_submitted = True

    def unanswered_submitted(self) -> list[int]:
        with self.lock:
            return sorted(self._in_air)

    def counts(self) -> Counts:
        return Counts(self.total, self.completed, self.failed)

    def unanswered(self) -> list[int]:
        with self.lock:
            return [n for n in range(1, self.total + 1) if not self.answered[n]]

    def done(self) -> bool:
        with self.lock:
            return self.completed + self.failed >= self.total
