"""Backlog bounds and tenants' limits in the dispatcher's core: refused records are
answered with their typed error, the rest are batched, and the counts go out to be shared."""

from __future__ import annotations

from headrace.limits.policy import TenantLimits, TenantUsage
from headrace.schemas.errors import ErrorCode
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.quotas import SYNC_INTERVAL_S, LimitsPolicy
from tests.workers.dispatcher.rig import WALL, Rig, of


def codes(actions: list[ev.Action]) -> list[ErrorCode]:
    return [a.error.code for a in of(ev.Answer, actions)]


def batched(actions: list[ev.Action]) -> int:
    return sum(len(s.batch.items) for s in of(ev.SendBatch, actions))


def test_past_its_bound_a_bucket_refuses_the_oldest_records_until_it_is_under() -> None:
    rig = Rig(limits=LimitsPolicy(bounds={16: 5}))
    rig.workers()
    rig.handle(ev.BacklogSeen({16: 8, 32: 100}))  # 32 has no bound
    out = rig.read(*(rig.request(f"r{i}") for i in range(6)))
    answers = of(ev.Answer, out)
    assert codes(out) == [ErrorCode.overloaded] * 3  # 8 -> 5: the first three
    assert [a.key[1] for a in answers if a.key] == ["r0", "r1", "r2"]
    assert answers[0].error.retry_after_s is not None and answers[0].error.retry_after_s >= 1
    out += rig.tick(0.05)
    assert batched(out) == 3
    out = rig.read(*(rig.request(f"s{i}", bucket=32) for i in range(3)))
    assert codes(out) == []  # unbounded


def test_a_flood_read_before_any_backlog_is_published_is_held_to_the_bound() -> None:
    """The dispatcher reads ahead (fair share): what it holds unanswered counts."""
    rig = Rig(limits=LimitsPolicy(bounds={16: 5}))
    rig.workers()
    out = rig.read(*(rig.request(f"r{i}") for i in range(9)))  # nothing published yet
    assert codes(out) == [ErrorCode.overloaded] * 3  # six held: the bound and the one past it
    out = rig.tick(0.05)
    assert batched(out) == 6
    rig.complete(of(ev.SendBatch, out)[0])
    assert codes(rig.read(rig.request("later"))) == []  # answered: room again


def test_sheddable_requests_are_refused_first_at_half_the_bound() -> None:
    rig = Rig(limits=LimitsPolicy(bounds={16: 10}))
    rig.workers()
    rig.handle(ev.BacklogSeen({16: 7}))  # under the bound, past half of it
    out = rig.read(
        rig.request("shed-1", priority="sheddable"),
        rig.request("plain"),
        rig.request("vip", priority="interactive"),
    )
    answers = of(ev.Answer, out)
    assert [a.key[1] for a in answers if a.key] == ["shed-1"]
    assert codes(out) == [ErrorCode.overloaded]
    assert "sheddable" in answers[0].error.message
    assert batched(out + rig.tick(0.05)) == 2
    rig.handle(ev.BacklogSeen({16: 4}))  # under half: sheddable ones pass too
    assert codes(rig.read(rig.request("shed-2", priority="sheddable"))) == []


def test_bulk_records_are_not_refused_for_the_online_backlog() -> None:
    rig = Rig(limits=LimitsPolicy(bounds={16: 1}))
    rig.workers()
    rig.handle(ev.BacklogSeen({16: 50}))
    out = rig.read(*(rig.request(f"b{i}", lane="bulk") for i in range(4)))
    assert codes(out) == []


def test_answers_since_the_backlog_was_seen_count_against_it() -> None:
    rig = Rig(limits=LimitsPolicy(bounds={16: 3}))
    rig.workers()
    rig.read(*(rig.request(f"r{i}") for i in range(3)))
    sends = of(ev.SendBatch, rig.tick(0.05))
    rig.handle(ev.BacklogSeen({16: 6}))
    for send in sends:
        rig.complete(send)  # three answered: the backlog is 3 now, at the bound
    assert codes(rig.read(rig.request("next"))) == []


def test_a_tenant_over_its_rate_is_refused_and_others_are_not() -> None:
    rig = Rig(limits=LimitsPolicy(defaults=TenantLimits(requests_per_s=3)))
    rig.workers()
    out = rig.read(*(rig.request(f"a{i}", tenant="acme") for i in range(5)))
    out += rig.read(*(rig.request(f"b{i}", tenant="other") for i in range(2)))
    assert codes(out) == [ErrorCode.rate_limited] * 2
    refused = [a.key for a in of(ev.Answer, out)]
    assert refused == [("acme", "a3"), ("acme", "a4")]
    rig.tick(1.0)  # the sliding second still holds all three (a sync is out: still counted)
    assert codes(rig.read(rig.request("a5", tenant="acme"))) == [ErrorCode.rate_limited]
    rig.tick(1.0)  # two seconds later it has room again
    assert codes(rig.read(rig.request("a6", tenant="acme"))) == []


def test_an_override_replaces_the_defaults_for_its_tenant() -> None:
    rig = Rig(limits=LimitsPolicy(window_s=3600))
    rig.workers()
    quota = {"small": TenantLimits(tokens_per_window=20)}
    rig.handle(ev.LimitsSynced({}, quota))
    out = rig.read(*(rig.request(f"q{i}", tenant="small", tokens=8) for i in range(3)))
    assert codes(out) == [ErrorCode.quota_exceeded]  # 8 + 8 fit, 24 > 20
    out = rig.read(*(rig.request(f"x{i}", tenant="big", tokens=8) for i in range(3)))
    assert codes(out) == []


def test_what_was_admitted_goes_out_to_be_shared_and_the_shared_counts_come_back() -> None:
    rig = Rig(limits=LimitsPolicy(defaults=TenantLimits(requests_per_s=4, tokens_per_window=100)))
    rig.workers()
    rig.read(rig.request("a", tenant="acme", tokens=8), rig.request("b", tenant="acme", tokens=8))
    syncs = of(ev.SyncLimits, rig.tick(SYNC_INTERVAL_S))
    assert len(syncs) == 1
    second, window = int(rig.wall), int(rig.wall // 3600)
    assert syncs[0].deltas["acme"].requests == {int(WALL): 2}
    assert syncs[0].deltas["acme"].tokens == {window: 16}
    assert syncs[0].tenants == ["acme"]
    assert of(ev.SyncLimits, rig.tick(SYNC_INTERVAL_S)) == []  # one sync at a time
    # another dispatcher admitted 90 tokens of acme's: the shared count says so
    shared = TenantUsage(requests={second: 3}, tokens={window: 106})
    rig.handle(ev.LimitsSynced({"acme": shared}, {}))
    out = rig.read(rig.request("c", tenant="acme", tokens=8))
    assert codes(out) == [ErrorCode.quota_exceeded]
    # a sync Redis refused: its counts are sent again with the next one
    rig.read(rig.request("d", tenant="other", tokens=8))
    sync = of(ev.SyncLimits, rig.tick(SYNC_INTERVAL_S))[0]
    rig.handle(ev.LimitsNotSynced(sync.deltas))
    again = of(ev.SyncLimits, rig.tick(SYNC_INTERVAL_S))[0]
    assert again.deltas["other"].tokens == {window: 8}


def test_what_this_dispatcher_holds_is_counted_again_after_its_batches_are_answered() -> None:
    """The rows in batches out are counted once a poll: the next poll sees them answered."""
    rig = Rig(limits=LimitsPolicy(bounds={16: 5}))
    rig.workers()
    rig.read(*(rig.request(f"r{i}") for i in range(6)))  # the bound and the one past it
    sends = of(ev.SendBatch, rig.tick(0.05))
    assert sum(len(s.batch.items) for s in sends) == 6
    assert codes(rig.read(rig.request("over"))) == [ErrorCode.overloaded]  # six out
    for send in sends:
        rig.complete(send)
    assert codes(rig.read(rig.request("room"))) == []  # answered: none out
