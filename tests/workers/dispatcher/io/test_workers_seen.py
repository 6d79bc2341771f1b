"""What the workers say of themselves, read for the core (on the in-memory ledger behind the
project's own ledger interface)."""

from __future__ import annotations

import logging

import pytest

from headrace.workers import task_body
from headrace.workers.dispatcher.io.workers_seen import BEATS_BEFORE_DEAD, WorkersWatch
from headrace.workers.ledger.memory import MemoryLedger


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_live_workers_runners_and_what_each_says_of_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    ledger = MemoryLedger(clock=clock)
    info = {"version": "v2", "plan": {"16": 8, "32": 0, "x": 3}, "slots": 4}
    ledger.heartbeat("w1", [16, 32], info)
    ledger.heartbeat("w2", [32], {"slots": "many"})  # says nothing usable of its slots
    ledger.claim([("acme", "r1")], "batch-1", 60_000, worker_id="w1")
    watch = WorkersWatch(ledger, [16, 32, 64], heartbeat_s=2.0)
    with caplog.at_level(logging.INFO):
        seen = watch.read(["batch-1", "batch-2"])
    assert seen.live == {16: frozenset({"w1"}), 32: frozenset({"w1", "w2"}), 64: frozenset()}
    assert seen.runners == {"batch-1": "w1", "batch-2": None}
    assert seen.versions == {"w1": "v2"}
    assert seen.plans == {"w1": {16: 8}, "w2": {}}  # rows > 0 of numbered buckets only
    assert seen.slots == {"w1": 4, "w2": 1}
    assert "worker plans read" in caplog.text

    caplog.clear()
    with caplog.at_level(logging.INFO):
        watch.read([])
    assert "worker plans read" not in caplog.text  # logged when they change, not each time

    clock.now += BEATS_BEFORE_DEAD * 2.0 + 0.1  # both missed their beats
    ledger.heartbeat("w2", [32])
    assert watch.read([]).live == {16: frozenset(), 32: frozenset({"w2"}), 64: frozenset()}


def test_batches_are_framed_only_while_every_live_worker_reads_framed_bodies() -> None:
    clock = Clock()
    ledger = MemoryLedger(clock=clock)
    watch = WorkersWatch(ledger, [16, 32], heartbeat_s=2.0)
    watch.read([])
    assert not watch.framed  # no worker seen: plain JSON, which any worker reads
    reads = {task_body.WORKER_READS: [task_body.SERIALIZER]}
    ledger.heartbeat("new-1", [16], reads)
    ledger.heartbeat("new-2", [32], reads)
    watch.read([])
    assert watch.framed
    ledger.heartbeat("old", [32], {"slots": 2})  # an older release says nothing of bodies
    watch.read([])
    assert not watch.framed
    ledger.heartbeat("odd", [32], {task_body.WORKER_READS: "headrace-batch"})  # not a list
    clock.now += BEATS_BEFORE_DEAD * 2.0 + 0.1  # "old" and "odd" gone; the new ones beat on
    ledger.heartbeat("new-1", [16], reads)
    ledger.heartbeat("new-2", [32], reads)
    watch.read([])
    assert watch.framed
