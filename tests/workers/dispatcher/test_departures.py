"""Batches out of the core: how many may wait ahead of the live workers, when a batch is
due, and a lane's topic paused once (driven through the core, with an injected clock)."""

from __future__ import annotations

import pytest

from headrace.workers.dispatcher import events as ev
from tests.workers.dispatcher.rig import Rig, ids, of


def test_a_free_slot_sends_at_once_and_one_batch_per_worker_waits_ahead() -> None:
    rig = Rig(max_batch_tokens=16)  # a 12-token request fills a batch
    rig.workers({16: {"w1"}, 32: set()})
    departures = rig.core.departures
    assert departures.openings(16, "online") == (True, True)
    rig.read(rig.request("r1", tokens=12))
    [first] = of(ev.SendBatch, rig.tick())  # the free slot: at once, not after its wait
    assert first.handoff and departures.openings(16, "online") == (False, True)
    # the worker is busy: one more batch may wait for it, not two
    rig.read(*(rig.request(f"r{i}", tokens=12) for i in (2, 3, 4)))
    sent = of(ev.SendBatch, rig.tick(0.05))
    assert [len(s.batch.items) for s in sent] == [1]
    assert not sent[0].handoff  # it queues behind the batch in flight
    assert departures.openings(16, "online") == (False, False)
    assert len(rig.core.batchers[16, "online"]) == 2  # the rest waits in the fair queues


def test_before_any_worker_is_seen_a_lone_batch_may_still_be_handed_over() -> None:
    """A pipeline just started: the live set is read once a second, and until then a batch
    is offered (an idle worker's token in Redis decides) while every batch in flight has a
    worker; one sent beside a batch that may still wait in Celery's queue queues behind it."""
    rig = Rig(max_batch_tokens=16)  # no worker seen yet: batches leave at their time
    rig.read(rig.request("r1", tokens=12), rig.request("r2", tokens=12))
    first, second = of(ev.SendBatch, rig.tick(0.05))
    assert (ids(first), first.handoff) == (["r1"], True)
    assert (ids(second), second.handoff) == (["r2"], False)  # r1 has no worker yet
    rig.handle(ev.HandedOff(first.batch.batch_id, "w1"))  # the offer took w1's token
    rig.read(rig.request("r3", tokens=12))
    [third] = of(ev.SendBatch, rig.tick(0.05))
    assert not third.handoff  # r2 went by Celery and may wait there: r3 queues behind it
    rig.complete(second)
    rig.complete(third)
    rig.read(rig.request("r4", tokens=12))
    [fourth] = of(ev.SendBatch, rig.tick(0.05))
    assert fourth.handoff  # r1 in flight, on w1: nothing to pass in the queue


def test_the_next_due_batch_sets_how_long_the_shell_may_sleep() -> None:
    rig = Rig()  # no worker seen yet: nothing leaves at once
    assert rig.core.departures.seconds_until_due() is None
    assert rig.core.poll_timeout_ms() == 100  # nothing waits, nothing out
    rig.read(rig.request("r1", tokens=8))  # 8 of 64 tokens: waits for more or its time
    assert not of(ev.SendBatch, rig.tick(0.005))
    assert rig.core.departures.seconds_until_due() == pytest.approx(0.015)  # 20 ms, 5 gone
    assert rig.core.poll_timeout_ms() in (14, 15)  # whole milliseconds, rounded down


def test_a_lane_is_paused_and_resumed_once_each() -> None:
    rig = Rig()
    departures, out = rig.core.departures, []
    departures.set_paused(16, "bulk", True, out)
    departures.set_paused(16, "bulk", True, out)  # already paused: nothing more to say
    departures.set_paused(16, "bulk", False, out)
    assert out == [
        ev.SetPaused("t.requests.b16.bulk", True),
        ev.SetPaused("t.requests.b16.bulk", False),
    ]
    assert departures.paused == set()


def test_a_bucket_sends_as_many_batches_as_its_live_workers_take() -> None:
    """Ten workers of one slot on a bucket: ten batches run at once, one more waits for each
    (the default cap follows the live workers; a fixed 8 left two of them idle)."""
    rig = Rig(max_batch_tokens=16, max_inflight_batches_per_bucket=None)
    workers = {f"w{i}" for i in range(10)}
    rig.workers({16: workers, 32: set()})
    rig.read(*(rig.request(f"r{i}", tokens=12) for i in range(30)))
    sent = of(ev.SendBatch, rig.tick(0.05))
    assert len(sent) == 20  # ten run, ten wait, one for each worker
    assert sum(s.handoff for s in sent) == 10  # the first ten into free places
    assert len(rig.core.batchers[16, "online"]) == 10  # the rest waits in the fair queues


def test_a_set_cap_holds_a_bucket_back_and_forms_no_batch_past_it() -> None:
    """``max_inflight_batches_per_bucket`` set: no more batches out than it says, and what
    waits stays in the fair queues (to be batched with what comes), not cut into batches
    that cannot leave."""
    rig = Rig(max_batch_tokens=64, max_inflight_batches_per_bucket=2)
    rig.workers({16: {"w1"}, 32: set()})
    rig.core.slots = {"w1": 64}  # a continuous-batching worker: many places
    for i in range(6):  # one by one, each alone in its poll
        rig.read(rig.request(f"r{i}", tokens=12))
        rig.tick()
    sent = of(ev.SendBatch, rig.actions)
    assert [ids(s) for s in sent] == [["r0"], ["r1"]]
    assert rig.core.flights.ready_count(16) == 0  # nothing formed behind the cap
    rig.complete(sent[0])
    [third] = of(ev.SendBatch, rig.tick())
    assert ids(third) == ["r2", "r3", "r4", "r5"]  # what waited, in one batch


def test_the_buckets_a_worker_serves_share_its_places() -> None:
    """One worker of 4 places serving both buckets: what one bucket holds of them the other
    cannot send into (each counting all 4 as its own had 10 out for 4 places)."""
    rig = Rig(max_batch_tokens=16, max_inflight_batches_per_bucket=None)
    rig.workers({16: {"w1"}, 32: {"w1"}})
    rig.core.slots = {"w1": 4}
    rig.read(*(rig.request(f"a{i}", tokens=12) for i in range(6)))
    sent = of(ev.SendBatch, rig.tick(0.05))
    assert [s.handoff for s in sent] == [True] * 4 + [False]  # 4 places and one waiting
    rig.read(*(rig.request(f"b{i}", bucket=32, tokens=12) for i in range(2)))
    assert not of(ev.SendBatch, rig.tick(0.05))  # the worker's places are all taken
    rig.complete(sent[0])
    [next_out] = of(ev.SendBatch, rig.tick())
    assert next_out.batch.bucket == 32  # a place came free: the bucket that waited
    assert not next_out.handoff  # bucket 16's waiting batch takes the worker's free place
