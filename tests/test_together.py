"""``entered_together``: managers start at once, and a failed start leaves none running."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import pytest

from tests.together import entered_together


def test_managers_enter_at_once_and_exit_last_first() -> None:
    events: list[str] = []
    barrier = threading.Barrier(3, timeout=5)  # passes only if all three are entering at once

    @contextlib.contextmanager
    def slow(name: str) -> Iterator[str]:
        barrier.wait()
        events.append(f"in {name}")
        yield name
        events.append(f"out {name}")

    with entered_together(slow("a"), slow("b"), slow("c")) as got:
        assert got == ["a", "b", "c"]
    assert events[-3:] == ["out c", "out b", "out a"]


def test_a_failed_start_exits_the_ones_that_started_and_raises() -> None:
    exited: list[str] = []

    @contextlib.contextmanager
    def fine(name: str) -> Iterator[str]:
        time.sleep(0.05)
        try:
            yield name
        finally:
            exited.append(name)

    @contextlib.contextmanager
    def broken() -> Iterator[None]:
        raise RuntimeError("no port")
        yield

    with (
        pytest.raises(RuntimeError, match="no port"),
        entered_together(fine("a"), broken(), fine("b")),
    ):
        pass
    assert sorted(exited) == ["a", "b"]
