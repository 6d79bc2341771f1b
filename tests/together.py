"""Several slow context managers (pipelines, gateways) entered at once, each in a thread of
its own: a fixture that needs four processes ready waits for the slowest, not their sum."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any


@contextlib.contextmanager
def entered_together(*managers: AbstractContextManager[Any]) -> Iterator[list[Any]]:
    """What each manager's ``__enter__`` gave, in order; on the way out each is exited, last
    first. If one fails to enter, those that entered are exited and its error is raised."""
    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(len(managers)) as pool:
            futures = [pool.submit(m.__enter__) for m in managers]
        entered, failed = [], None
        for manager, future in zip(managers, futures, strict=True):
            error = future.exception()
            if error is None:
                stack.push(manager.__exit__)
                entered.append(future.result())
            elif failed is None:
                failed = error
        if failed is not None:
            raise failed
        yield entered
