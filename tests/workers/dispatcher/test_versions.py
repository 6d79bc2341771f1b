"""Versions in the dispatcher's core: each ready batch is cut by the version that serves each
request and each part goes to that version's queue, tracked until answered; shadowed
requests are copied once to the shadow's queue, untracked; a version without a live worker
gives way to the stable one; a policy change applies to the next batch."""

from __future__ import annotations

from headrace.models.traffic import Shadow, TrafficPolicy
from headrace.workers.dispatcher import events as ev
from tests.workers.dispatcher.rig import TOPICS, Rig, ids, of

LIVE = {16: {"w1", "w2"}, 32: {"w1", "w2"}}


def versioned(policy: TrafficPolicy | None, versions: dict[str, str] | None = None) -> Rig:
    rig = Rig(max_batch_tokens=4096, max_inflight_batches_per_bucket=64)
    rig.handle(ev.TrafficSeen(stable="v1", policy=policy, revision=1))
    seen = ev.WorkersSeen(
        {b: frozenset(w) for b, w in LIVE.items()},
        versions=versions if versions is not None else {"w1": "v1", "w2": "v2"},
    )
    rig.handle(seen)
    return rig


def sent(rig: Rig, n: int = 200) -> list[ev.SendBatch]:
    rig.read(*[rig.request(f"r{i}") for i in range(n)])
    return of(ev.SendBatch, rig.tick(0.05))


def test_without_a_policy_every_batch_goes_to_the_stable_versions_queue() -> None:
    [send] = sent(versioned(None), 20)
    assert send.queue == TOPICS.queue(16, "online", "v1") == "t.b16@v1"
    assert send.batch.model_version == "v1" and not send.batch.shadow


def test_a_split_cuts_each_batch_by_version_and_every_part_is_tracked_until_answered() -> None:
    rig = versioned(TrafficPolicy(stable="v1", split={"v1": 50, "v2": 50}))
    sends = sent(rig)
    by_version = {s.batch.model_version: s for s in sends}
    assert set(by_version) == {"v1", "v2"}
    assert {s.queue for s in sends} == {"t.b16@v1", "t.b16@v2"}
    assert sorted(i for s in sends for i in ids(s)) == sorted(f"r{i}" for i in range(200))
    assert 60 < len(ids(by_version["v2"])) < 140
    rig.complete(by_version["v1"])
    assert rig.core.flights.waiting_count() == len(ids(by_version["v2"]))
    rig.complete(by_version["v2"])
    assert rig.core.flights.waiting_count() == 0


def test_a_version_without_a_live_worker_for_the_bucket_gives_way_to_stable() -> None:
    rig = versioned(
        TrafficPolicy(stable="v1", split={"v1": 50, "v2": 50}), {"w1": "v1", "w2": "v1"}
    )
    [send] = sent(rig)
    assert send.batch.model_version == "v1" and len(ids(send)) == 200


def test_a_policy_change_applies_to_the_next_batch() -> None:
    rig = versioned(None)
    [before] = sent(rig, 10)
    rig.handle(ev.TrafficSeen(stable="v2", policy=TrafficPolicy(stable="v2"), revision=2))
    rig.read(*[rig.request(f"s{i}") for i in range(10)])
    [after] = of(ev.SendBatch, rig.tick(0.05))
    assert (before.batch.model_version, after.batch.model_version) == ("v1", "v2")


def test_shadowed_requests_are_copied_once_to_the_shadow_untracked() -> None:
    rig = versioned(TrafficPolicy(stable="v1", shadow=Shadow(version="v2", share=0.5)))
    sends = sent(rig)
    [served] = [s for s in sends if not s.shadow]
    [copy] = [s for s in sends if s.shadow]
    assert served.queue == "t.b16@v1" and copy.queue == "t.b16@v2"
    assert copy.batch.shadow and copy.batch.model_version == "v2"
    copied = set(ids(copy))
    assert 60 < len(copied) < 140
    # the served batch marks exactly the copied requests; the copies point back at it
    marked = {i.request.request_id for i in served.batch.items if i.compare_with == "v2"}
    assert marked == copied
    assert {i.compare_with for i in copy.batch.items} == {"v1"}
    assert copy.batch.batch_id not in rig.core.in_flight_batch_ids()
    rig.complete(served)  # answered in full once the served batch is: nothing waits on the copy
    assert rig.core.flights.waiting_count() == 0
    assert rig.core.stats.shadowed == len(copied)


def test_no_shadow_copy_goes_to_a_shadow_without_a_live_worker() -> None:
    rig = versioned(
        TrafficPolicy(stable="v1", shadow=Shadow(version="v3", share=1.0)),
        {"w1": "v1", "w2": "v1"},
    )
    sends = sent(rig, 20)
    assert [s.shadow for s in sends] == [False]
    assert all(i.compare_with is None for i in sends[0].batch.items)
