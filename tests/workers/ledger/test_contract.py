"""The ledger's contract, held by both implementations: Redis (the real one, on the local
stack) and the in-memory one that unit tests of batch rules use. What a unit test on
``MemoryLedger`` relies on is checked here against Redis."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.schemas.messages import Completion, RecordRef
from headrace.workers.ledger import ClaimState, Ledger, MemoryLedger, RedisLedger, ReplyAt
from tests.clock import FakeClock


@dataclass
class Store:
    """A ledger, how time passes for it, and how it loses its data."""

    ledger: Ledger
    later: Callable[[float], None]
    wipe: Callable[[], None]


def redis_ledger() -> RedisLedger:
    """A ledger on the local stack's Redis, under a prefix of its own."""
    return RedisLedger(connections.redis_client(Settings()), f"t-{uuid.uuid4().hex[:8]}", 60)


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> Store:
    if request.param == "memory":
        clock = FakeClock()
        memory = MemoryLedger(60, clock=clock)
        return Store(memory, lambda s: clock.advance_ms(s * 1000), memory.wipe)
    request.getfixturevalue("stack")
    real = redis_ledger()
    return Store(real, time.sleep, lambda: real.redis.delete(real.keys.epoch))


def test_claim_answer_and_redelivery(store: Store) -> None:
    ledger = store.ledger
    ids = [("acme", "r1"), ("acme", "r2")]
    assert ledger.claim(ids, "batch-a", 10_000) == [ClaimState.fresh, ClaimState.fresh]
    # the same owner may claim again (its own retry); another owner sees busy
    assert ledger.claim(ids[:1], "batch-a", 10_000) == [ClaimState.fresh]
    assert ledger.claim(ids, "batch-b", 10_000) == [ClaimState.busy, ClaimState.busy]
    ledger.mark_answered(ids[:1])
    assert ledger.claim(ids, "batch-b", 10_000) == [ClaimState.answered, ClaimState.busy]
    assert ledger.release(ids[1:], "batch-b") == 0  # not b's claim: kept
    assert ledger.release(ids[1:], "batch-a") == 1
    assert ledger.claim(ids[1:], "batch-b", 10_000) == [ClaimState.fresh]


def test_tenants_do_not_share_request_ids(store: Store) -> None:
    ledger = store.ledger
    ledger.mark_answered([("acme", "same-id")])
    assert ledger.claim([("globex", "same-id")], "b", 1000) == [ClaimState.fresh]


def test_claims_expire_with_their_lease(store: Store) -> None:
    ledger = store.ledger
    ledger.claim([("t", "r")], "old", 1)
    store.later(0.02)
    assert ledger.claim([("t", "r")], "new", 1000) == [ClaimState.fresh]


def test_completions_queue_in_order(store: Store) -> None:
    ledger = store.ledger
    ref = RecordRef(topic="x", partition=0, offset=3)
    ledger.finish_batch([("t", "r1")], "d1", Completion(batch_id="b1", done=[ref]))
    ledger.finish_batch([], "d1", Completion(batch_id="b2", done=[], deferred=[ref]))
    taken = ledger.take_completions("d1")
    assert [c.batch_id for c in taken] == ["b1", "b2"]
    assert taken[1].deferred == [ref]
    assert ledger.take_completions("d1") == []
    assert ledger.claim([("t", "r1")], "later", 1000) == [ClaimState.answered]


def test_heartbeats_count_live_workers(store: Store) -> None:
    ledger = store.ledger
    ledger.heartbeat("w1", [16, 32])
    ledger.heartbeat("w2", [32])
    assert ledger.live_workers([16, 32, 64], within_s=5) == {
        16: {"w1"},
        32: {"w1", "w2"},
        64: set(),
    }
    ledger.retire("w2", [32])
    assert ledger.live_workers([32], within_s=5) == {32: {"w1"}}


def test_cancelled_requests_are_claimed_as_cancelled(store: Store) -> None:
    ledger = store.ledger
    ledger.cancel("acme", "r2")
    assert ledger.cancelled([("acme", "r1"), ("acme", "r2"), ("globex", "r2")]) == [
        False,
        True,
        False,
    ]
    states = ledger.claim([("acme", "r1"), ("acme", "r2")], "b", 10_000)
    assert states == [ClaimState.fresh, ClaimState.cancelled]
    ledger.mark_answered([("acme", "r2")])  # answered `cancelled`: a redelivery does nothing
    assert ledger.claim([("acme", "r2")], "c", 10_000) == [ClaimState.answered]


def test_running_batches_and_epoch(store: Store) -> None:
    ledger = store.ledger
    assert ledger.claim([("t", "r")], "b1", 1000, worker_id="w1") == [ClaimState.fresh]
    assert ledger.runners(["b1", "b2"]) == ["w1", None]
    assert ledger.begin_send([("t", "r")], "b1", 5000) == [False]
    assert ledger.holders([("t", "r")]) == ["sending:b1"]
    assert ledger.claim([("t", "r")], "b2", 1000) == [ClaimState.busy]
    ledger.cancel("t", "r")
    assert ledger.begin_send([("t", "r")], "b1", 5000) == [True]
    ledger.end_batch("b1")
    assert ledger.runners(["b1"]) == [None]
    first = ledger.epoch("e1")
    assert first == "e1" and ledger.epoch("e2") == "e1"  # set once
    store.wipe()  # what a store that lost its data looks like
    assert ledger.epoch("e3") == "e3"


def test_where_a_reply_landed_is_kept_and_a_lost_one_is_claimed_again(store: Store) -> None:
    ledger = store.ledger
    ids = [("acme", "r1"), ("acme", "r2"), ("acme", "r3")]
    at = ReplyAt("t.replies.default", 0, 41)
    ledger.mark_answered(ids[:2], where={ids[0]: at})
    assert ledger.replies_at(ids) == [at, None, None]  # r2: no place recorded
    # r1's reply is gone: claimed again for the batch answering it now; r3 was never
    # answered, so it is not taken from whoever may hold it
    assert ledger.reclaim([ids[0], ids[2]], "batch-z", 10_000) == [True, False]
    assert ledger.holders(ids[:1]) == ["batch-z"]
    assert ledger.claim(ids[:1], "batch-y", 10_000) == [ClaimState.busy]
    finished = Completion(batch_id="batch-z", done=[RecordRef(topic="t", partition=0, offset=1)])
    again = ReplyAt("t.replies.default", 0, 97)
    ledger.finish_batch(ids[:1], "d1", finished, where={ids[0]: again})
    assert ledger.replies_at(ids[:1]) == [again] and ledger.holders(ids[:1]) == ["answered"]
    assert ReplyAt.decode(again.encode().encode()) == again  # topic names may hold ':'


def test_a_dead_workers_computing_claims_are_taken_but_not_its_sending_ones(store: Store) -> None:
    ledger = store.ledger
    ids = [("acme", "c1"), ("acme", "s1"), ("acme", "l1")]
    ledger.claim(ids[:2], "batch-dead", 10_000, worker_id="w-dead")
    ledger.begin_send(ids[1:2], "batch-dead", 10_000)  # s1's reply may be out
    ledger.claim(ids[2:], "batch-live", 10_000, worker_id="w-live")
    ledger.heartbeat("w-live", [16])  # w-dead never beats again
    holders = [h or "" for h in ledger.holders(ids)]
    assert holders == ["batch-dead", "sending:batch-dead", "batch-live"]
    taken = ledger.take_from_dead(ids, holders, "batch-new", 10_000, 5.0, [16])
    assert taken == [True, False, False]
    assert ledger.holders(ids) == ["batch-new", "sending:batch-dead", "batch-live"]
