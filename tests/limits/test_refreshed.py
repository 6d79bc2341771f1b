"""Reads kept for a moment and refreshed beside their readers, on an injected clock and a
queue of reloads run by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from headrace.limits.refreshed import Refreshed


class Source:
    def __init__(self) -> None:
        self.value = 1
        self.loads = 0
        self.fail = False

    def load(self) -> int:
        self.loads += 1
        if self.fail:
            raise ConnectionError("store away")
        return self.value


@pytest.fixture
def now() -> list[float]:
    return [100.0]


@pytest.fixture
def queued() -> list[Callable[[], None]]:
    return []


@pytest.fixture
def reads(now: list[float], queued: list[Callable[[], None]]) -> Refreshed[str, int]:
    return Refreshed(1.0, 5.0, queued.append, lambda: now[0], maxsize=2)


def test_fresh_then_stale_while_reloading_then_new(
    reads: Refreshed[str, int], now: list[float], queued: list[Callable[[], None]]
) -> None:
    source = Source()
    assert reads.get("k", source.load) == 1 and source.loads == 1  # missing: waited for
    source.value = 2
    now[0] += 0.5
    assert reads.get("k", source.load) == 1 and not queued  # fresh
    now[0] += 0.6
    assert reads.get("k", source.load) == 1  # stale: served, one reload queued
    assert reads.get("k", source.load) == 1 and len(queued) == 1 and source.loads == 1
    queued.pop()()
    assert reads.get("k", source.load) == 2 and not queued  # fresh again from the reload


def test_a_key_unread_past_stale_s_is_read_while_the_reader_waits(
    reads: Refreshed[str, int], now: list[float], queued: list[Callable[[], None]]
) -> None:
    source = Source()
    reads.get("k", source.load)
    source.value = 3
    now[0] += 5.0
    assert reads.get("k", source.load) == 3 and not queued


def test_a_failed_reload_keeps_the_value_and_the_next_reader_tries_again(
    reads: Refreshed[str, int], now: list[float], queued: list[Callable[[], None]]
) -> None:
    source = Source()
    reads.get("k", source.load)
    source.fail = True
    now[0] += 2.0
    assert reads.get("k", source.load) == 1
    queued.pop()()  # fails: logged, the value stays
    assert reads.get("k", source.load) == 1 and len(queued) == 1  # queued again
    source.fail, source.value = False, 4
    queued.pop()()
    assert reads.get("k", source.load) == 4
    source.fail = True
    now[0] += 5.0
    with pytest.raises(ConnectionError):  # a load the reader waits for raises to it
        reads.get("k", source.load)


def test_an_inline_reload_is_the_value_served(now: list[float]) -> None:
    reads: Refreshed[str, int] = Refreshed(1.0, 5.0, lambda job: job(), lambda: now[0])
    source = Source()
    reads.get("k", source.load)
    source.value = 5
    now[0] += 1.5
    assert reads.get("k", source.load) == 5


def test_keys_are_kept_apart_and_the_least_recent_goes(
    reads: Refreshed[str, int], now: list[float]
) -> None:
    a, b, c = Source(), Source(), Source()
    b.value, c.value = 2, 3
    assert [reads.get("a", a.load), reads.get("b", b.load), reads.get("c", c.load)] == [1, 2, 3]
    reads.get("a", a.load)  # maxsize 2: "a" went when "c" came
    assert a.loads == 2 and b.loads == 1


def test_fresh_s_within_stale_s() -> None:
    with pytest.raises(ValueError, match="fresh_s"):
        Refreshed(2.0, 1.0, lambda job: job(), lambda: 0.0)
