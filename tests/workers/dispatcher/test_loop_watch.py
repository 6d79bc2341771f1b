"""The dispatcher loop's watch: a pass past its stall time is reported once, then every
repeat_s while it lasts; the watcher logs where the loop's thread stands and wakes the
broker client."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from headrace.workers.dispatcher.loop_watch import LoopWatch, LoopWatcher
from tests.clock import FakeClock


def test_a_stall_is_reported_once_then_every_repeat_while_it_lasts() -> None:
    clock = FakeClock()
    watch = LoopWatch(clock, stall_s=5, repeat_s=30)
    clock.now += 4.9
    assert watch.due() is None
    clock.now += 0.2
    assert watch.due() == pytest.approx(5.1)
    clock.now += 10
    assert watch.due() is None  # said already
    clock.now += 20.5
    assert watch.due() == pytest.approx(35.6)
    watch.beat()
    clock.now += 1
    assert watch.due() is None
    clock.now += 5
    assert watch.due() == pytest.approx(6)  # a new stall: said at once


def test_the_watcher_logs_the_loop_s_stack_and_wakes_the_client(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    def stuck_in_poll() -> None:  # stands for a poll that does not return
        release.wait(10)

    loop = threading.Thread(target=stuck_in_poll)
    loop.start()
    woken = threading.Event()
    watch = LoopWatch(time.monotonic, stall_s=0.2, repeat_s=30)
    watcher = LoopWatcher(watch, loop, lambda: (woken.set(), release.set())[0], every_s=0.05)
    with caplog.at_level(logging.WARNING):
        watcher.start()
        assert woken.wait(5)
    watcher.stop()
    loop.join(5)
    [said] = [r.getMessage() for r in caplog.records if "dispatcher loop" in r.getMessage()]
    assert "stuck_in_poll" in said and "release.wait" in said
