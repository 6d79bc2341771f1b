"""``eventually``: the one way a test waits for another thread or process to do something.
It asks again and again until the answer is yes, instead of sleeping a fixed time and
hoping: fast when the other side is fast, and a clear failure naming what never came
when it is not."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(
    check: Callable[[], T],
    timeout_s: float = 30.0,
    what: str = "the condition",
    every_s: float = 0.05,
) -> T:
    """Call ``check`` until it returns something truthy, and return that. An
    ``AssertionError`` it raises counts as "not yet" (any other error fails at once); past
    ``timeout_s`` the last one is chained to the failure."""
    deadline = time.monotonic() + timeout_s
    while True:
        last: AssertionError | None = None
        try:
            value = check()
            if value:
                return value
        except AssertionError as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s:g} s") from last
        time.sleep(every_s)
