"""The worker's stall watch: a forward pass that has not ended after stall_s, with none other
ending meanwhile, is a stall (never an idle model, never a slow one that moves); the watcher
logs every thread's stack, retires the worker and exits with STALL_EXIT_CODE. The backends
run every forward pass under their pulse, so a hung one shows."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from headrace.workers.backends.pulse import Pulse
from headrace.workers.stall_watch import STALL_EXIT_CODE, StallWatch, StallWatcher
from tests.clock import FakeClock


def test_only_a_pass_that_does_not_end_is_a_stall() -> None:
    clock = FakeClock()
    watch = StallWatch(clock, stall_s=20)
    clock.now += 100
    assert watch.check(0, 0) is None  # idle for long: not a stall
    for ended in range(1, 30):  # passes of 15 s each, one after another: slow, moving
        clock.now += 15
        assert watch.check(1, ended) is None
    clock.now += 19.9
    assert watch.check(1, 29) is None
    clock.now += 0.2
    assert watch.check(1, 29) == pytest.approx(20.1)
    clock.now += 5
    assert watch.check(1, 29) == pytest.approx(25.1)
    assert watch.check(0, 29) is None  # it ended after all: the watch starts over
    clock.now += 1
    assert watch.check(1, 29) is None  # a new pass: counted from the idle look before it
    clock.now += 19
    assert watch.check(1, 29) == pytest.approx(20)


def test_the_pulse_counts_passes_under_way_and_ended() -> None:
    pulse = Pulse()
    entered, release = threading.Event(), threading.Event()

    def hung() -> None:
        with pulse.forward():
            entered.set()
            release.wait(10)

    t = threading.Thread(target=hung)
    t.start()
    assert entered.wait(5)
    assert pulse.read() == (1, 0)
    with pulse.forward():
        assert pulse.read() == (2, 0)
    assert pulse.read() == (1, 1)
    release.set()
    t.join(5)
    assert pulse.read() == (0, 2)
    with pytest.raises(ValueError), pulse.forward():
        raise ValueError("a failed pass ends too")
    assert pulse.read() == (0, 3)


def test_the_watcher_logs_every_stack_retires_and_exits_at_a_stall(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pulse, release = Pulse(), threading.Event()

    def hung_kernel() -> None:  # stands for a forward pass that never returns
        with pulse.forward():
            release.wait(10)

    model = threading.Thread(target=hung_kernel, name="model")
    model.start()
    exited: list[int] = []
    retired, done = threading.Event(), threading.Event()
    watcher = StallWatcher(
        StallWatch(time.monotonic, stall_s=0.3),
        pulse.read,
        retired.set,
        every_s=0.05,
        exit=lambda code: (exited.append(code), done.set()),
    )
    with caplog.at_level(logging.ERROR):
        watcher.start()
        assert done.wait(5)
    release.set()
    model.join(5)
    assert exited == [STALL_EXIT_CODE] and retired.is_set()
    [said] = [r.getMessage() for r in caplog.records if "forward pass" in r.getMessage()]
    assert "thread model" in said and "hung_kernel" in said


def test_a_moving_model_is_never_ended() -> None:
    pulse, stop = Pulse(), threading.Event()

    def steps() -> None:
        while not stop.is_set():
            with pulse.forward():
                stop.wait(0.02)

    model = threading.Thread(target=steps)
    model.start()
    exited: list[int] = []
    watcher = StallWatcher(
        StallWatch(time.monotonic, stall_s=0.2),
        pulse.read,
        lambda: None,
        every_s=0.02,
        exit=exited.append,
    ).start()
    stop.wait(1.0)
    watcher.stop()
    stop.set()
    model.join(5)
    assert exited == [] and pulse.read()[1] > 10
