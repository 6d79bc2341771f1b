"""The memory plan acts in the dispatcher's core: each bucket's batches hold at most the
rows its smallest live worker's plan allows; no plan, no cap."""

from __future__ import annotations

from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.row_caps import row_caps
from tests.workers.dispatcher.rig import Rig, ids, of


def test_the_smallest_live_plan_caps_a_buckets_batches() -> None:
    rig = Rig(max_batch_tokens=4096, max_inflight_batches_per_bucket=64)
    plans = {"w1": {16: 5, 32: 2}, "w2": {16: 3}}
    live = {16: frozenset({"w1", "w2"}), 32: frozenset({"w1"})}
    rig.handle(ev.WorkersSeen(live, plans=plans))
    rig.read(*[rig.request(f"r{i}") for i in range(10)])
    sends = of(ev.SendBatch, rig.tick(0.05))
    assert [len(ids(s)) for s in sends] == [3, 3, 3, 1]
    for send in sends:
        rig.complete(send)
    # w2 gone: w1's plan holds five rows
    rig.handle(ev.WorkersSeen({16: frozenset({"w1"}), 32: frozenset({"w1"})}, plans=plans))
    rig.read(*[rig.request(f"s{i}") for i in range(10)])
    assert [len(ids(s)) for s in of(ev.SendBatch, rig.tick(0.05))] == [5, 5]


def test_caps_come_from_live_plans_only() -> None:
    live = {16: frozenset({"w1", "w2"}), 32: frozenset(), 64: frozenset({"w3"})}
    plans = {"w1": {16: 4}, "w2": {16: 0}, "gone": {16: 1}}
    assert row_caps(live, plans) == {16: 1, 32: None, 64: None}  # never below one row
