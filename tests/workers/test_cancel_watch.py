"""One watch asks the ledger which running requests were cancelled, for every batch of a
worker at once; each batch reads its own rows' answer. Policy: on the in-memory ledger
(tests/workers/ledger/test_contract.py holds it to Redis' behaviour)."""

from __future__ import annotations

import time
from collections.abc import Callable

from headrace.workers.cancel_watch import CancelWatch, Key
from headrace.workers.ledger import Ledger, MemoryLedger
from tests.eventually import eventually


def _counted(ledger: Ledger) -> tuple[Callable[[list[Key]], list[bool]], list[int]]:
    """The ledger's lookup, and the number of keys each call asked for."""
    lookups: list[int] = []

    def lookup(keys: list[Key]) -> list[bool]:
        lookups.append(len(keys))
        return ledger.cancelled(keys)

    return lookup, lookups


def test_each_batch_sees_its_own_cancelled_rows_from_one_lookup_for_all() -> None:
    ledger = MemoryLedger()
    lookup, lookups = _counted(ledger)
    watch = CancelWatch(lookup, interval_s=0.05)
    try:
        first = watch.watch([("t1", "a"), ("t1", "b"), ("t1", "c")])
        second = watch.watch([("t2", "b"), ("t1", "d")])
        ledger.cancel("t1", "b")
        ledger.cancel("t1", "d")
        # t1's "b" is cancelled, the other tenant's "b" (second's row 0) is not
        eventually(
            lambda: first.cancelled() == {1} and second.cancelled() == {1}, 5, "both see row 1"
        )
        assert set(lookups) == {5}  # every look asks for both batches' rows at once
        first.close()
        looks = watch.looks
        eventually(lambda: watch.looks > looks + 1, 5, "two more looks")
        assert lookups[-1] == 2  # a closed batch is no longer asked about
    finally:
        watch.close()


def test_nothing_watched_asks_nothing_and_a_failed_lookup_keeps_the_last_answer() -> None:
    ledger = MemoryLedger()
    fail = [False]

    def lookup(keys: list[tuple[str, str]]) -> list[bool]:
        if fail[0]:
            raise ConnectionError("Redis away")
        return ledger.cancelled(keys)

    watch = CancelWatch(lookup, interval_s=0.05)
    try:
        time.sleep(0.2)
        assert watch.looks == 0
        watched = watch.watch([("t", "x"), ("t", "y")])
        ledger.cancel("t", "y")
        eventually(lambda: watched.cancelled() == {1}, 5, "row 1 cancelled")
        fail[0] = True
        looks = watch.looks
        time.sleep(0.2)
        assert watch.looks == looks  # no answer came
        assert watched.cancelled() == {1}  # the last one stands
    finally:
        watch.close()


def test_a_batch_reads_memory_not_redis() -> None:
    lookup, lookups = _counted(MemoryLedger())
    watch = CancelWatch(lookup, interval_s=0.05)
    try:
        watched = watch.watch([("t", "z")])
        before = len(lookups)
        for _ in range(1000):
            watched.cancelled()
        assert len(lookups) - before <= 1  # a thousand asks, at most the watch's own look
    finally:
        watch.close()
