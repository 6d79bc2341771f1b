"""The dispatcher loop's watch: a pass past its stall time is reported once, then every
repeat_s while it lasts; the watcher logs where the loop's thread stands and wakes the
broker client."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from headrace.workers.dispatcher.io.loop_watch import LoopWatch, LoopWatcher
from headrace.workers.stall_watch import STALL_EXIT_CODE
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


def test_a_pass_past_exit_s_is_fatal_between_repeats() -> None:
    clock = FakeClock()
    watch = LoopWatch(clock, stall_s=5, repeat_s=30, exit_s=40)
    clock.now += 5
    assert watch.due() == pytest.approx(5) and not watch.fatal(5)
    clock.now += 30
    assert watch.due() == pytest.approx(35) and not watch.fatal(35)
    clock.now += 5  # the next repeat is 25 s away; the exit is now
    assert watch.due() == pytest.approx(40) and watch.fatal(40)
    assert not LoopWatch(clock, stall_s=5).fatal(1e9)  # no exit_s: never


def test_the_watcher_exits_with_every_thread_s_stack_when_the_stall_is_fatal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()

    def stuck_for_good() -> None:
        release.wait(10)

    loop = threading.Thread(target=stuck_for_good)
    loop.start()
    exited: list[int] = []
    done = threading.Event()
    watch = LoopWatch(time.monotonic, stall_s=0.1, repeat_s=30, exit_s=0.3)
    watcher = LoopWatcher(
        watch,
        loop,
        lambda: None,
        every_s=0.05,
        exit=lambda code: (exited.append(code), done.set()),
    )
    with caplog.at_level(logging.WARNING):
        watcher.start()
        assert done.wait(5)
    release.set()
    loop.join(5)
    assert exited == [STALL_EXIT_CODE]
    [fatal] = [r.getMessage() for r in caplog.records if "exiting" in r.getMessage()]
    assert "stuck_for_good" in fatal and "loop-watch" in fatal  # every thread, named
