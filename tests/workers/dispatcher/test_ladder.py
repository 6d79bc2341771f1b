"""The degradation ladder: the pure choice of rung (``ladder``), and the dispatcher's core
walking it: the fallback version when the stable one has no live worker, the cache (asked of
the shell), the canned answer, the reject; per-tenant opt-out; the late trigger; recovery
once the bucket serves again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from headrace.models.traffic import TrafficPolicy
from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import (
    CacheDirective,
    Completion,
    EmbeddingResult,
    GenerationResult,
    Request,
    Usage,
)
from headrace.schemas.params import GenerateParams
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.ladder import LadderPolicy, descend, late
from tests.workers.dispatcher.rig import MODEL, Rig, ids, of

CANNED = EmbeddingResult(embedding=[0.0, 0.0], token_count=0)
NOBODY: dict[int, set[str]] = {16: set(), 32: set()}


def request(**fields: object) -> Request:
    return Request(request_id="r1", tenant="acme", model=MODEL, input="x", reply_to="t.r", **fields)  # type: ignore[arg-type]


# --- the pure choice -------------------------------------------------------------------------
def test_each_rung_is_offered_only_where_it_can_serve() -> None:
    policy = LadderPolicy(canned={MODEL: CANNED})
    plain = descend(policy, request(), "no_workers", "why")
    assert (plain.cache, plain.canned) == (False, CANNED)  # no cache directive: no lookup
    cached = descend(policy, request(cache=CacheDirective()), "failing", "why")
    assert cached.cache and cached.error.code is ErrorCode.unavailable
    generate = request(task="generate", params=GenerateParams())
    assert descend(policy, generate, "no_workers", "why").canned is None  # not its kind
    text = GenerationResult(
        text="busy", finish_reason="stop", usage=Usage(prompt_tokens=0, completion_tokens=0)
    )
    assert descend(LadderPolicy(canned={MODEL: text}), generate, "late", "w").canned == text
    assert not descend(policy, generate, "late", "w").cache  # no directive: it would not repeat
    greedy = request(task="generate", params=GenerateParams(), cache=CacheDirective())
    assert descend(policy, greedy, "no_workers", "why").cache  # a cached generation serves
    assert descend(policy, request(), "late", "why").error.code is ErrorCode.deadline_exceeded


def test_rungs_left_out_of_the_ladder_and_opted_out_tenants_get_the_reject() -> None:
    only_reject = LadderPolicy(rungs=("reject",), canned={MODEL: CANNED})
    step = descend(only_reject, request(cache=CacheDirective()), "no_workers", "why")
    assert (step.cache, step.canned, step.error.message) == (False, None, "why")
    opted = LadderPolicy(canned={MODEL: CANNED}, opt_out=frozenset({"acme"}))
    step = descend(opted, request(cache=CacheDirective()), "no_workers", "why")
    assert (step.cache, step.canned) == (False, None)


def test_late_means_the_queued_work_outlasts_what_the_deadline_leaves() -> None:
    policy = LadderPolicy(late_factor=1.0)
    assert late(policy, queued_s=5.0, left_s=2.0)
    assert not late(policy, queued_s=1.0, left_s=2.0)
    assert not late(policy, queued_s=None, left_s=2.0)  # cost not measured yet
    assert not late(policy, queued_s=5.0, left_s=None)  # no deadline
    assert not late(LadderPolicy(late_factor=0), queued_s=5.0, left_s=2.0)  # trigger off


# --- the core walking it ---------------------------------------------------------------------
def without_workers(**overrides: object) -> Rig:
    rig = Rig(**overrides)
    rig.workers()
    rig.workers(NOBODY)  # they are gone
    rig.tick(5.1)  # past degrade_after_s
    return rig


def test_no_live_worker_the_canned_answer_serves_marked_and_workers_back_compute_again() -> None:
    rig = without_workers(ladder=LadderPolicy(canned={MODEL: CANNED}))
    [answer] = of(ev.Answer, rig.read(rig.request("r1")))
    assert answer.error is None and answer.result == CANNED
    assert answer.degraded is not None
    assert (answer.degraded.rung, answer.degraded.reason) == ("canned", "no_workers")
    rig.delivered(answer)
    rig.workers()  # a worker beats again: no rung, computed
    rig.read(rig.request("r2"))
    [send] = of(ev.SendBatch, rig.tick(0.05))
    assert ids(send) == ["r2"] and send.batch.items[0].degraded is None


def test_a_request_that_asked_for_caching_is_looked_up_before_the_canned_answer() -> None:
    rig = without_workers(ladder=LadderPolicy(canned={MODEL: CANNED}))
    [look] = of(ev.LookUpCache, rig.read(rig.request("r1", cache=CacheDirective())))
    assert look.reason == "no_workers" and look.request.request_id == "r1"
    assert look.otherwise.result == CANNED  # what answers on a miss


def test_an_opted_out_tenant_gets_the_typed_reject_and_others_the_rung() -> None:
    rig = without_workers(
        ladder=LadderPolicy(canned={MODEL: CANNED}, opt_out=frozenset({"strict"}))
    )
    strict, other = of(ev.Answer, rig.read(rig.request("r1", tenant="strict"), rig.request("r2")))
    assert strict.result is None and strict.error is not None
    assert strict.error.code is ErrorCode.unavailable and strict.degraded is None
    assert other.degraded is not None and other.result == CANNED


def test_a_failing_bucket_puts_requests_on_the_ladder_until_its_cooldown_ends() -> None:
    rig = Rig(ladder=LadderPolicy(canned={MODEL: CANNED}))
    rig.workers()
    rig.read(*[rig.request(f"r{i}") for i in range(4)])
    [send] = of(ev.SendBatch, rig.tick())
    rig.complete(send, failed=4)  # min_requests 4, every one a model error: breaker open
    [answer] = of(ev.Answer, rig.read(rig.request("r9")))
    assert answer.degraded is not None and answer.degraded.reason == "failing"
    rig.tick(10.1)  # the cooldown (10 s) is over: half-open, computed again
    rig.workers()
    rig.read(rig.request("r10"))
    assert ids(of(ev.SendBatch, rig.tick(0.05))[0]) == ["r10"]


def test_a_request_whose_deadline_the_queued_work_outlasts_is_answered_at_once() -> None:
    rig = Rig(ladder=LadderPolicy(canned={MODEL: CANNED}))
    rig.workers()
    rig.read(rig.request("r0"))
    [send] = of(ev.SendBatch, rig.tick(0.05))
    done = [send.batch.items[0].ref]  # one request of bucket 16 cost its one worker 2 s
    rig.handle(
        ev.CompletionsRead(
            [Completion(batch_id=send.batch.batch_id, done=done, compute_ms=2000, computed=1)]
        )
    )
    rig.handle(ev.BacklogSeen({16: 10}))  # ten waiting: ~20 s of work
    deadline = datetime.fromtimestamp(rig.wall, UTC) + timedelta(seconds=5)
    [answer] = of(ev.Answer, rig.read(rig.request("late", deadline=deadline)))
    assert answer.degraded is not None and answer.degraded.reason == "late"
    roomy = datetime.fromtimestamp(rig.wall, UTC) + timedelta(seconds=60)
    assert not of(ev.Answer, rig.read(rig.request("roomy", deadline=roomy)))
    assert not of(ev.Answer, rig.read(rig.request("no-deadline")))


def test_the_stable_version_without_a_live_worker_gives_way_to_the_previous_one() -> None:
    rig = Rig(max_batch_tokens=4096)
    policy = TrafficPolicy(stable="v2", previous_stable="v1")
    rig.handle(ev.TrafficSeen(stable="v2", policy=policy, revision=1))
    live = {16: frozenset({"w1"}), 32: frozenset({"w1"})}
    rig.handle(ev.WorkersSeen(live, {}, versions={"w1": "v1"}))  # only v1 is up
    rig.read(rig.request("r1"))
    [send] = of(ev.SendBatch, rig.tick(0.05))
    assert send.batch.model_version == "v1"
    [item] = send.batch.items
    assert item.degraded is not None and item.degraded.rung == "fallback_version"
    rig.handle(ev.WorkersSeen(live, {}, versions={"w1": "v2"}))  # v2 is back
    rig.read(rig.request("r2"))
    [again] = of(ev.SendBatch, rig.tick(0.05))
    assert again.batch.model_version == "v2" and again.batch.items[0].degraded is None
    off = Rig(max_batch_tokens=4096, ladder=LadderPolicy(rungs=("cache", "reject")))
    off.handle(ev.TrafficSeen(stable="v2", policy=policy, revision=1))
    off.handle(ev.WorkersSeen(live, {}, versions={"w1": "v1"}))
    off.read(off.request("r1"))
    [send] = of(ev.SendBatch, off.tick(0.05))
    assert send.batch.model_version == "v2"  # the rung is off: it waits for v2
