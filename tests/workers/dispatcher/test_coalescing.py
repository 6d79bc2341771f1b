"""In-flight coalescing through the dispatcher's core: identical requests in flight share one
computation, each is answered once under its own id, and a computation that gives no result
lets its waiters be computed. Events and a fake clock; the real-service tests are in
tests/integration/test_coalescing.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import CacheDirective
from headrace.schemas.params import GenerateParams
from headrace.transport.base import Record
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.coalescing import RECENT_S
from tests.workers.dispatcher.rig import TOPICS, Rig, ids, of, ref

P16 = (TOPICS.requests(16), 0)
CACHED = CacheDirective(generations={"tenant/acme": 1})


def cached(rig: Rig, request_id: str, **fields: Any) -> Record:
    """A request whose client reads the cache (it carries a cache directive)."""
    fields.setdefault("cache", CACHED)
    return rig.request(request_id, **fields)


def answer_of(share: ev.Share) -> dict[str, ev.Answer]:
    return {a.key[1]: a for a in share.answers if a.key is not None}


def test_identical_requests_share_one_computation_and_each_gets_its_own_answer() -> None:
    rig = Rig()
    rig.workers()
    records = [cached(rig, f"r{i}") for i in range(5)]
    rig.read(*records)
    [send] = of(ev.SendBatch, rig.tick())
    assert ids(send) == ["r0"]  # the leader alone is computed
    assert len(rig.core.coalescer) == 4 and rig.core.coalescer.coalesced == 4
    [share] = of(ev.Share, rig.complete(send))
    assert share.leader.request_id == "r0" and share.version is None
    answers = answer_of(share)
    assert sorted(answers) == ["r1", "r2", "r3", "r4"]
    for i, record in enumerate(records[1:], start=1):
        a = answers[f"r{i}"]
        assert (a.ref, a.key, a.reply_to, a.error) == (
            ref(record),
            ("acme", f"r{i}"),
            "t.replies.default",
            None,
        )
    # the followers' offsets are committed only once their answers are delivered
    commits = [c.offsets.get(P16, -1) for c in of(ev.Commit, rig.tick(0.2))]
    assert max(commits, default=-1) < len(records)
    rig.delivered(*share.answers)
    assert of(ev.Commit, rig.tick(0.2))[-1].offsets[P16] == len(records)
    assert len(rig.core.coalescer) == 0 and not rig.core.coalescer.sharing


def test_a_follower_arriving_while_its_leader_computes_waits_for_it() -> None:
    rig = Rig()
    rig.workers()
    rig.read(cached(rig, "r0"))
    [send] = of(ev.SendBatch, rig.tick())
    rig.read(cached(rig, "r1"))
    assert not of(ev.SendBatch, rig.tick(1))
    [share] = of(ev.Share, rig.complete(send))
    assert list(answer_of(share)) == ["r1"]


def test_only_requests_a_cached_result_may_serve_are_coalesced() -> None:
    rig = Rig()
    rig.workers()
    sampled = GenerateParams(temperature=0.7, max_tokens=4)
    greedy = GenerateParams(temperature=0.0, max_tokens=4)
    rig.read(
        rig.request("plain0"),  # no cache directive: its client does not read the cache
        rig.request("plain1"),
        cached(rig, "sampled0", task="generate", params=sampled),  # would not repeat
        cached(rig, "sampled1", task="generate", params=sampled),
        cached(rig, "greedy0", task="generate", params=greedy),
        cached(rig, "greedy1", task="generate", params=greedy),
        cached(rig, "session0", task="generate", params=greedy, session_id="s"),
        cached(rig, "session1", task="generate", params=greedy, session_id="s"),
    )
    sent = [i for s in of(ev.SendBatch, rig.tick(1)) for i in ids(s)]
    assert sorted(sent) == sorted(
        ["plain0", "plain1", "sampled0", "sampled1", "greedy0", "session0", "session1"]
    )
    assert rig.core.coalescer.coalesced == 1  # greedy1, on greedy0


def test_requests_differing_in_generations_tenant_priority_or_lane_are_not_coalesced() -> None:
    rig = Rig()
    rig.workers()
    rig.read(
        cached(rig, "a"),
        cached(rig, "b", cache=CacheDirective(generations={"tenant/acme": 2})),  # invalidated
        cached(rig, "c", tenant="other"),
        cached(rig, "d", priority="interactive"),
        cached(rig, "e", lane="bulk"),
        cached(rig, "f", input="other words here"),
    )
    sent = [i for s in of(ev.SendBatch, rig.tick(6)) for i in ids(s)]
    assert sorted(sent) == ["a", "b", "c", "d", "e", "f"]
    assert rig.core.coalescer.coalesced == 0


def test_coalescing_off_computes_every_request() -> None:
    rig = Rig(coalesce=False)
    rig.workers()
    rig.read(*[cached(rig, f"r{i}") for i in range(3)])
    [send] = of(ev.SendBatch, rig.tick())
    assert ids(send) == ["r0", "r1", "r2"]


def test_followers_of_a_leader_with_no_result_are_computed_on_their_own() -> None:
    rig = Rig()
    rig.workers()
    rig.read(*[cached(rig, f"r{i}") for i in range(3)])
    [send] = of(ev.SendBatch, rig.tick())
    [share] = of(ev.Share, rig.complete(send))
    rig.handle(ev.NotShared([a.ref for a in share.answers]))
    [again] = of(ev.SendBatch, rig.tick())
    assert ids(again) == ["r1", "r2"]  # both computed: never made to wait on each other
    assert not of(ev.Share, rig.complete(again))
    assert committed_after(rig) == 3


def committed_after(rig: Rig) -> int:
    return max(c.offsets.get(P16, -1) for c in of(ev.Commit, rig.tick(0.2)))


def test_a_leader_sent_again_after_its_lease_keeps_its_followers() -> None:
    rig = Rig(lease_base_s=10)
    rig.workers()
    rig.read(cached(rig, "r0"), cached(rig, "r1"))
    [first] = of(ev.SendBatch, rig.tick())
    [again] = of(ev.SendBatch, rig.tick(10.5))  # no worker started it in its lease
    assert ids(again) == ["r0"]
    assert ids(first) == ["r0"] and len(rig.core.coalescer) == 1  # r1 still waits
    [share] = of(ev.Share, rig.complete(again))
    assert list(answer_of(share)) == ["r1"]
    assert not of(ev.Share, rig.complete(first))  # a late answer of the first: once only


def test_a_follower_cancelled_while_it_waits_is_answered_at_once() -> None:
    rig = Rig()
    rig.workers()
    rig.read(*[cached(rig, f"r{i}") for i in range(3)])
    [send] = of(ev.SendBatch, rig.tick())
    [answer] = of(ev.Answer, rig.handle(ev.Cancelled([("acme", "r1")])))
    assert (answer.key, answer.error and answer.error.code) == (
        ("acme", "r1"),
        ErrorCode.cancelled,
    )
    [share] = of(ev.Share, rig.complete(send))
    assert list(answer_of(share)) == ["r2"]


def test_a_follower_past_its_deadline_is_answered_so() -> None:
    rig = Rig()
    rig.workers()
    soon = datetime.fromtimestamp(rig.wall + 1, UTC)
    later = datetime.fromtimestamp(rig.wall + 60, UTC)
    rig.read(cached(rig, "r0"), cached(rig, "r1", deadline=soon))
    rig.read(cached(rig, "r2", deadline=later))
    [send] = of(ev.SendBatch, rig.tick())
    [late] = of(ev.Answer, rig.tick(1.5))
    assert late.key == ("acme", "r1") and late.error is not None
    assert late.error.code is ErrorCode.deadline_exceeded
    [share] = of(ev.Share, rig.complete(send))
    assert list(answer_of(share)) == ["r2"]


def test_a_leader_whose_partition_is_taken_away_leaves_its_followers_to_be_computed() -> None:
    rig = Rig(max_inflight_batches_per_bucket=1)
    other = Rig().request  # a record like the rig's, but on partition 1
    rig.workers({16: set()})  # no live worker: everything waits in its batcher
    leader = cached(rig, "r0")
    rig.read(leader)
    r1 = other("r1", cache=CACHED)
    follower = Record(r1.topic, 1, 0, None, r1.value)
    rig.read(follower)
    assert len(rig.core.coalescer) == 1
    rig.handle(ev.PartitionsRevoked([P16]))  # the leader's partition goes
    rig.workers()
    sends = of(ev.SendBatch, rig.tick(1))
    assert [ids(s) for s in sends] == [["r1"]]


def test_a_follower_whose_partition_is_taken_away_is_dropped() -> None:
    rig = Rig()
    rig.workers()
    rig.read(cached(rig, "r0"))
    r1 = Rig().request("r1", cache=CACHED)
    rig.read(Record(r1.topic, 1, 0, None, r1.value))
    [send] = of(ev.SendBatch, rig.tick())
    rig.handle(ev.PartitionsRevoked([(TOPICS.requests(16), 1)]))
    assert len(rig.core.coalescer) == 0
    assert not of(ev.Share, rig.complete(send))  # its new owner reads it again


def test_a_batch_s_model_version_goes_with_its_share() -> None:
    rig = Rig()
    rig.workers()
    rig.read(cached(rig, "r0"), cached(rig, "r1"))
    [send] = of(ev.SendBatch, rig.tick())
    rig.core.coalescer.sent([send.batch.items[0].ref], "v7")  # as a versioned batch says
    [share] = of(ev.Share, rig.complete(send))
    assert share.version == "v7"


def test_a_shared_answer_a_worker_holds_is_deferred_and_sent_again() -> None:
    rig = Rig()
    rig.workers()
    rig.read(cached(rig, "r0"), cached(rig, "r1"))
    [send] = of(ev.SendBatch, rig.tick())
    [share] = of(ev.Share, rig.complete(send))
    [answer] = share.answers
    assert answer.may_defer
    rig.handle(ev.AnswerDeferred(answer.ref))  # a worker of an earlier owner has it
    [again] = of(ev.SendBatch, rig.tick(1))
    assert ids(again) == ["r1"]


def test_an_expired_follower_deadline_in_the_past_at_read_is_refused_not_attached() -> None:
    rig = Rig()
    rig.workers()
    past = datetime.fromtimestamp(rig.wall, UTC) - timedelta(seconds=1)
    rig.read(cached(rig, "r0"))
    [answer] = of(ev.Answer, rig.read(cached(rig, "r1", deadline=past)))
    assert answer.error is not None and answer.error.code is ErrorCode.deadline_exceeded
    assert len(rig.core.coalescer) == 0


def test_a_request_identical_to_one_just_answered_is_answered_from_its_result() -> None:
    """Its client looked the cache up before the result was written: the dispatcher looks
    again, for RECENT_S, instead of computing it again; if nothing is found, it computes."""
    rig = Rig()
    rig.workers()
    rig.read(cached(rig, "r0"))
    [send] = of(ev.SendBatch, rig.tick())
    assert not of(ev.Share, rig.complete(send))  # nobody waited on it
    [share] = of(ev.Share, rig.read(cached(rig, "r1")))
    assert share.leader.request_id == "r0" and list(answer_of(share)) == ["r1"]
    rig.handle(ev.NotShared([a.ref for a in share.answers]))  # its result was not found
    [again] = of(ev.SendBatch, rig.tick())
    assert ids(again) == ["r1"]
    # the lookup missed: the next identical request is computed, not looked up again
    assert not of(ev.Share, rig.read(cached(rig, "r2")))
    [third] = of(ev.SendBatch, rig.tick(0.05))
    assert ids(third) == ["r2"]
    rig.complete(third)
    assert of(ev.Share, rig.read(cached(rig, "r3")))  # r2's result: looked up
    rig.tick(RECENT_S + 1)
    assert not of(ev.Share, rig.read(cached(rig, "r4")))  # forgotten after RECENT_S
