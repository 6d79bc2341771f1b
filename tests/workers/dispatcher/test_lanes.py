"""Online before bulk, and bulk always moves: the lane policy alone, then through the core
with events and a fake clock."""

from __future__ import annotations

from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.lanes import BucketLanes, LanePolicy, next_lane
from tests.workers.dispatcher.rig import TOPICS, Rig, ids, of

POLICY = LanePolicy(reserved_workers=1, starvation_s=5.0, harvest_after_s=1.0)
KEEP_ONE = LanePolicy(harvest_after_s=None)  # a worker kept for online even when it is idle


def lanes(**overrides: object) -> BucketLanes:
    state: dict[str, object] = {
        "online_ready": False,
        "bulk_ready": False,
        "in_flight": 0,
        "bulk_on_its_workers": 0,
        "max_inflight": 8,
        "live_workers": 3,
        "bulk_waited_s": 0.0,
        **overrides,
    }
    return BucketLanes(**state)  # type: ignore[arg-type]


def test_online_goes_first_and_bulk_leaves_a_worker_free() -> None:
    assert next_lane(lanes(online_ready=True, bulk_ready=True), POLICY) == "online"
    one_out = lanes(bulk_ready=True, bulk_on_its_workers=1, in_flight=1)
    assert next_lane(one_out, POLICY) == "bulk"
    # three live workers, one kept for online: bulk holds at most two on them
    two_out = lanes(bulk_ready=True, bulk_on_its_workers=2, in_flight=2)
    assert next_lane(two_out, POLICY) is None
    # ... counting what other buckets on the same workers hold
    elsewhere = lanes(bulk_ready=True, bulk_on_its_workers=2)
    assert next_lane(elsewhere, POLICY) is None
    assert next_lane(lanes(bulk_ready=True, live_workers=1), POLICY) == "bulk"  # at least one
    assert next_lane(lanes(online_ready=True, in_flight=8), POLICY) is None  # the bucket's limit
    assert next_lane(lanes(), POLICY) is None


def test_a_starving_bulk_batch_goes_out_even_while_online_is_busy() -> None:
    hungry = lanes(online_ready=True, bulk_ready=True, bulk_waited_s=5.0)
    assert next_lane(hungry, POLICY) == "bulk"
    moving = lanes(online_ready=True, bulk_ready=True, bulk_waited_s=9.0, bulk_on_its_workers=1)
    assert next_lane(moving, POLICY) == "online"  # bulk has one out on the workers: it moves


def test_through_the_core_online_overtakes_a_bulk_backlog() -> None:
    rig = Rig(
        max_batch_tokens=16,
        bulk_max_batch_tokens=16,
        max_inflight_batches_per_bucket=4,
        lanes=KEEP_ONE,
    )  # a batch: 2 requests
    rig.workers({16: {"w1", "w2"}, 32: {"w1", "w2"}})
    rig.read(*[rig.request(f"bulk{i}", lane="bulk") for i in range(8)])
    sent = of(ev.SendBatch, rig.tick())
    # two live workers, one kept for online: one bulk batch out, the rest wait
    assert [s.queue for s in sent] == ["t.b16.bulk"]
    assert rig.core.topic_busy(TOPICS.requests(16, "bulk"))
    rig.read(rig.request("online1"), rig.request("online2"))
    [online] = of(ev.SendBatch, rig.tick())
    assert online.queue == "t.b16" and ids(online) == ["online1", "online2"]
    assert ev.SetPaused(TOPICS.requests(16), True) not in rig.actions  # online never waited
    rig.complete(sent[0])
    [next_bulk] = of(ev.SendBatch, rig.tick())
    assert next_bulk.queue == "t.b16.bulk" and ids(next_bulk) == ["bulk2", "bulk3"]


def test_through_the_core_bulk_moves_under_a_steady_online_load() -> None:
    rig = Rig(max_batch_tokens=16, bulk_max_batch_tokens=16, max_inflight_batches_per_bucket=1)
    rig.workers({16: {"w1"}, 32: {"w1"}})
    rig.read(*[rig.request(f"bulk{i}", lane="bulk") for i in range(4)])
    rig.read(rig.request("o0"), rig.request("o1"))
    out = of(ev.SendBatch, rig.tick())
    served = [s.queue for s in out]
    for n in range(2, 40, 2):  # online keeps one batch ready at every turn
        rig.read(rig.request(f"o{n}"), rig.request(f"o{n + 1}"))
        for send in out:
            rig.complete(send)
        out = of(ev.SendBatch, rig.tick(0.5))
        served += [s.queue for s in out]
    assert "t.b16.bulk" in served  # bulk waited 5 s at most, then went
    assert served.count("t.b16") > served.count("t.b16.bulk")


def test_bulk_of_every_bucket_counts_against_the_workers_they_share() -> None:
    rig = Rig(
        max_batch_tokens=16,
        bulk_max_batch_tokens=16,
        max_inflight_batches_per_bucket=4,
        lanes=KEEP_ONE,
    )
    rig.workers({16: {"w1", "w2"}, 32: {"w1", "w2"}})  # both workers serve both buckets
    rig.read(*[rig.request(f"short{i}", lane="bulk") for i in range(4)])
    rig.read(*[rig.request(f"long{i}", bucket=32, tokens=12, lane="bulk") for i in range(4)])
    sent = of(ev.SendBatch, rig.tick())
    assert len(sent) == 1  # one worker for bulk in all, the other kept for online
    rig.workers({16: {"w1", "w2"}, 32: {"w3", "w4"}})  # separate worker groups
    assert len(of(ev.SendBatch, rig.tick())) == 1  # now the other group takes one too


def test_a_bulk_request_too_long_for_its_topic_is_forwarded_in_its_lane() -> None:
    rig = Rig()
    rig.workers()
    [forward] = of(ev.Forward, rig.read(rig.request("long", tokens=20, hint=8, lane="bulk")))
    assert forward.topic == TOPICS.requests(32, "bulk")


def test_bulk_harvests_the_reserved_worker_only_once_online_has_been_quiet() -> None:
    full = lanes(bulk_ready=True, bulk_on_its_workers=2, in_flight=2)  # 2 of 3 workers
    assert next_lane(full, POLICY) is None  # online was busy just now: one stays free
    assert next_lane(lanes(**{**full.__dict__, "online_quiet_s": 0.5}), POLICY) is None
    assert next_lane(lanes(**{**full.__dict__, "online_quiet_s": 1.0}), POLICY) == "bulk"
    assert next_lane(lanes(**{**full.__dict__, "online_quiet_s": None}), POLICY) == "bulk"
    assert next_lane(lanes(**{**full.__dict__, "online_quiet_s": None}), KEEP_ONE) is None
    every = lanes(bulk_ready=True, bulk_on_its_workers=3, in_flight=3, online_quiet_s=9.0)
    assert next_lane(every, POLICY) is None  # one bulk batch per worker at most


def test_through_the_core_bulk_fills_idle_workers_and_yields_when_online_comes() -> None:
    rig = Rig(max_batch_tokens=16, bulk_max_batch_tokens=16, max_inflight_batches_per_bucket=4)
    rig.workers({16: {"w1", "w2"}, 32: {"w1", "w2"}})
    rig.read(*[rig.request(f"bulk{i}", lane="bulk") for i in range(8)])
    sent = of(ev.SendBatch, rig.tick())
    assert [s.queue for s in sent] == ["t.b16.bulk"] * 2  # no online seen: both workers
    rig.read(rig.request("online1"), rig.request("online2"))
    [online] = of(ev.SendBatch, rig.tick())
    assert online.queue == "t.b16"  # it goes out now, to the first worker free
    rig.complete(sent[0])
    assert not of(ev.SendBatch, rig.tick(0.5))  # online just ran: bulk keeps one free again
    rig.complete(online)
    assert not of(ev.SendBatch, rig.tick(0.5))  # quiet for 0.5 s only
    [harvest] = of(ev.SendBatch, rig.tick(0.6))  # quiet for 1.1 s: the idle worker is bulk's
    assert harvest.queue == "t.b16.bulk"
