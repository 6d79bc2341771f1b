"""The dispatcher's delivery rules, driven through its core with events and a fake clock:
no broker, no Redis, no worker. The real-service fault suite (tests/faults) proves the
shell around it."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from headrace.schemas.errors import ErrorCode
from headrace.schemas.messages import Batch, Completion, Request
from headrace.schemas.params import GenerateParams
from headrace.schemas.signing import request_signature
from headrace.schemas.wire import batch_body
from headrace.transport.base import Record
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.health import HealthPolicy
from headrace.workers.dispatcher.observer import Observer
from tests.workers.dispatcher.rig import MODEL, TOPICS, Rig, count_words, ids, of, ref

P16 = (TOPICS.requests(16), 0)


def committed(actions: list[ev.Action], partition: tuple[str, int] = P16) -> int:
    """The highest offset committed for ``partition`` in ``actions`` (-1: none)."""
    return max((c.offsets.get(partition, -1) for c in of(ev.Commit, actions)), default=-1)


# --- batching ---------------------------------------------------------------------------------


def test_a_lone_request_goes_out_at_once_when_a_worker_is_idle() -> None:
    rig = Rig()
    rig.workers()
    rig.read(rig.request("r1"))
    [send] = of(ev.SendBatch, rig.tick())
    assert ids(send) == ["r1"]
    assert (send.queue, send.batch.bucket, send.batch.attempt) == ("t.b16", 16, 1)
    assert (send.real_tokens, send.padded_tokens) == (8, 8)


def test_without_an_idle_worker_a_batch_waits_max_wait_from_its_first_arrival() -> None:
    rig = Rig()
    rig.read(rig.request("r1"))
    assert not of(ev.SendBatch, rig.tick(0.010))
    rig.read(rig.request("r2"))
    assert not of(ev.SendBatch, rig.tick(0.009))
    [send] = of(ev.SendBatch, rig.tick(0.002))
    assert ids(send) == ["r1", "r2"]


def test_a_batch_closes_at_its_padded_token_budget() -> None:
    rig = Rig(max_batch_tokens=64)  # rows x longest: 8 rows of 8 tokens
    rig.read(*[rig.request(f"r{i}") for i in range(9)])
    [send] = of(ev.SendBatch, rig.tick())
    assert ids(send) == [f"r{i}" for i in range(8)]
    [rest] = of(ev.SendBatch, rig.tick(0.03))
    assert ids(rest) == ["r8"]


def test_the_in_flight_limit_holds_batches_back_and_a_full_read_ahead_pauses_the_bucket() -> None:
    # one batch's worth (64 tokens) may wait unformed: past it the topic is paused
    rig = Rig(max_inflight_batches_per_bucket=1, fair_read_ahead_tokens=64)
    rig.workers()
    rig.read(*[rig.request(f"r{i}") for i in range(24)])
    out = rig.tick()
    [first] = of(ev.SendBatch, out)
    assert ev.SetPaused(TOPICS.requests(16), True) in out
    assert rig.core.topic_busy(TOPICS.requests(16))
    assert not of(ev.SendBatch, rig.tick(1))
    rig.complete(first)
    out = rig.tick()
    [second] = of(ev.SendBatch, out)
    assert ids(second) == [f"r{i}" for i in range(8, 16)]
    assert ev.SetPaused(TOPICS.requests(16), False) in out  # the last 8 formed behind it


# --- offsets --------------------------------------------------------------------------------


def test_an_offset_is_committed_only_once_every_request_below_it_is_answered() -> None:
    rig = Rig()
    rig.workers()
    records = [rig.request(f"r{i}") for i in range(3)]
    rig.read(*records)
    [send] = of(ev.SendBatch, rig.tick())
    assert committed(rig.tick(0.2)) <= 0
    rig.complete(send, only=["r1", "r2"])  # r0 still computing
    assert committed(rig.tick(0.2)) <= 0
    rig.complete(send, only=["r0"])
    assert committed(rig.tick(0.2)) == 3


def test_a_second_record_of_a_waiting_request_is_answered_with_the_first() -> None:
    rig = Rig()
    rig.workers()
    first, again = rig.request("r1"), rig.request("r1")
    rig.read(first, again)
    [send] = of(ev.SendBatch, rig.tick())
    assert ids(send) == ["r1"] and rig.core.stats.duplicates == 1
    rig.complete(send)
    assert committed(rig.tick(0.2)) == 2


def test_records_after_a_gap_are_read_again_from_where_it_began() -> None:
    rig = Rig()
    rig.read(rig.request("r0"))
    rig.next_offset[TOPICS.requests(16)] = 5  # offsets 1..4 never came
    out = rig.read(rig.request("r5"))
    assert out == [ev.Seek(P16, 1)]
    plain = Rig(contiguous_offsets=False)  # Apache Kafka: transactional producers leave gaps
    plain.read(plain.request("r0"))
    plain.next_offset[TOPICS.requests(16)] = 5
    assert not of(ev.Seek, plain.read(plain.request("r5")))


def test_partitions_revoked_commit_what_is_done_and_drop_what_waits() -> None:
    rig = Rig()
    rig.workers()
    rig.read(rig.request("r0"))
    [send] = of(ev.SendBatch, rig.tick())
    rig.complete(send)
    rig.read(rig.request("r1"))  # waits in its batcher
    out = rig.handle(ev.PartitionsRevoked([P16]))
    assert out == [ev.Commit({P16: 1}, sync=True)]
    assert not of(ev.SendBatch, rig.tick(1))  # its new owner reads r1 again


# --- answers the dispatcher gives itself ------------------------------------------------------


def test_a_malformed_record_is_dead_lettered_and_its_offset_waits_for_the_flush() -> None:
    rig = Rig()
    [answer] = of(ev.Answer, rig.read(rig.raw(b"{not json")))
    assert answer.error.code is ErrorCode.invalid_json
    assert answer.dead_letter is not None and answer.reply_to is None
    assert not answer.may_defer
    assert committed(rig.tick(0.2)) <= 0  # not before the broker has the dead letter
    rig.delivered(answer)
    assert committed(rig.tick(0.2)) == 1


def test_a_record_of_the_wrong_schema_is_answered_where_it_says() -> None:
    rig = Rig()
    raw = b'{"request_id": "x1", "tenant": "acme", "reply_to": "t.replies.default", "input": 5}'
    [answer] = of(ev.Answer, rig.read(rig.raw(raw)))
    assert answer.error.code is ErrorCode.invalid_schema
    assert (answer.reply_to, answer.key) == ("t.replies.default", ("acme", "x1"))


def test_a_request_whose_reply_to_is_no_reply_topic_of_the_pipeline_is_never_answered_there() -> (
    None
):
    rig = Rig()
    for name in ("a b", "t.requests.b16", "other.replies.default", "t.replies."):
        doc = {"request_id": "x1", "tenant": "acme", "model": MODEL, "input": "hi"}
        raw = json.dumps({**doc, "reply_to": name}).encode()
        [answer] = of(ev.Answer, rig.read(rig.raw(raw)))
        assert answer.reply_to is None, name
        assert answer.error is not None and answer.error.code is ErrorCode.invalid_schema
        assert answer.dead_letter is not None and name in answer.dead_letter.original
    assert not of(ev.SendBatch, rig.tick(1))


def test_a_request_whose_reply_topic_does_not_exist_is_refused_and_never_batched() -> None:
    rig = Rig()
    rig.workers()
    rig.core.records_in.screen.reply_topic_exists = lambda topic: topic != "t.replies.default"
    [answer] = of(ev.Answer, rig.read(rig.request("r1")))
    assert answer.error is not None and answer.error.code is ErrorCode.invalid_schema
    assert answer.reply_to is None and answer.dead_letter is not None
    assert not of(ev.SendBatch, rig.tick(1))


def test_a_tenant_that_signs_gets_only_its_signed_requests_served() -> None:
    key = b"acme-signing-key"
    rig = Rig(tenant_keys={"acme": (key,)})
    rig.workers()

    def signed(
        request_id: str,
        with_key: bytes = key,
        change: dict[str, Any] | None = None,
        **fields: Any,
    ) -> Record:
        """Signed over the record, then ``change``d (what a forger who saw it could send)."""
        record = rig.request(request_id, **fields)
        request = Request.model_validate_json(record.value)
        signature = request_signature(with_key, request.signable())
        changed = request.model_copy(update={"signature": signature, **(change or {})})
        return rig.raw(changed.model_dump_json().encode())

    turn = {"task": "generate", "params": GenerateParams(), "session_id": "mine"}
    long_ago = datetime.fromtimestamp(rig.wall - rig.core.config.answered_ttl_s - 60, UTC)
    out = rig.read(
        rig.request("plain"),  # acme signs: an unsigned one is refused
        signed("forged", with_key=b"another key"),
        signed("good"),
        signed("other-input", change={"input": "words the tenant never signed"}),
        signed("other-session", change={"session_id": "someone-elses"}, **turn),
        signed("replayed", created_at=long_ago),  # signed, but older than ids are remembered
        rig.request("other", tenant="globex"),  # globex has no key: served as before
    )
    refused = of(ev.Answer, out)
    assert len(refused) == 5
    for answer in refused:
        assert answer.error is not None and answer.error.code is ErrorCode.unauthenticated
        assert answer.reply_to is None and answer.key is None  # no reply, no claim
        assert answer.dead_letter is not None
    sent = of(ev.SendBatch, out + rig.tick())
    assert sorted(i for send in sent for i in ids(send)) == ["good", "other"]


def test_new_tenant_keys_apply_from_the_next_record() -> None:
    """The shell reads the key folder again when it changes (``KeyFolder``) and hands the
    core the keys: a tenant that starts signing is held to it at once."""
    rig = Rig()
    rig.workers()
    assert not of(ev.Answer, rig.read(rig.request("before")))
    rig.core.handle(ev.TenantKeysRead({"acme": (b"fresh-key",)}))
    [refused] = of(ev.Answer, rig.read(rig.request("after")))
    assert refused.error is not None and refused.error.code is ErrorCode.unauthenticated
    rig.core.handle(ev.TenantKeysRead({}))
    assert not of(ev.Answer, rig.read(rig.request("again")))


def test_a_dead_letter_keeps_a_bounded_start_of_its_record_and_names_the_whole() -> None:
    rig = Rig()
    raw = bytes(range(32)) * 10_000  # 320 KB of control bytes: 1.9 MB as escaped JSON
    [answer] = of(ev.Answer, rig.read(rig.raw(raw)))
    letter = answer.dead_letter
    assert letter is not None and letter.original_truncated
    assert (letter.original_bytes, letter.original_sha256) == (
        len(raw),
        hashlib.sha256(raw).hexdigest(),
    )
    assert len(letter.model_dump_json()) < 200_000


def test_a_polls_requests_are_counted_in_one_call_whatever_their_partitions() -> None:
    """The tokenizer's cost per text falls with the call's size (issue 35's dispatcher cost):
    a poll over three topics is counted once, not once per partition."""
    calls: list[int] = []

    def count(texts: list[str]) -> list[int]:
        calls.append(len(texts))
        return count_words(texts)

    rig = Rig()
    rig.core.records_in.count_tokens = count
    rig.workers()
    records = [rig.request(f"s{i}", bucket=16, tokens=8) for i in range(3)]
    records += [rig.request(f"l{i}", bucket=32, tokens=20) for i in range(2)]
    records += [rig.request("b0", bucket=16, tokens=8, lane="bulk")]
    assert len({r.tp for r in records}) == 3
    rig.read(*records)
    assert calls == [6]


def test_a_record_the_core_raises_on_is_dead_lettered_and_the_rest_of_the_poll_goes_on() -> None:
    def count(texts: list[str]) -> list[int]:
        if any("boom" in t for t in texts):
            raise RuntimeError("tokenizer fell over")
        return count_words(texts)

    rig = Rig()
    rig.core.records_in.count_tokens = count
    rig.workers()
    out = rig.read(rig.request("r1"), rig.request("bad", input="boom boom"), rig.request("r2"))
    [answer] = of(ev.Answer, out)
    assert answer.key == ("acme", "bad") and answer.dead_letter is not None
    [send] = of(ev.SendBatch, out + rig.tick())
    assert ids(send) == ["r1", "r2"]


def test_a_record_a_later_step_raises_on_is_dead_lettered_as_internal_and_others_go_on() -> None:
    rig = Rig()
    refusal = rig.core.records_in.quotas.refusal

    def raising(tenant: str, *args: Any) -> Any:
        if tenant == "evil":
            raise KeyError(tenant)
        return refusal(tenant, *args)

    rig.core.records_in.quotas.refusal = raising  # type: ignore[method-assign]
    rig.workers()
    out = rig.read(rig.request("r1"), rig.request("x", tenant="evil"), rig.request("r2"))
    [answer] = of(ev.Answer, out)
    assert answer.error is not None and answer.error.code is ErrorCode.internal
    assert (answer.key, answer.reply_to) == (("evil", "x"), "t.replies.default")
    [send] = of(ev.SendBatch, out + rig.tick())
    assert ids(send) == ["r1", "r2"]
    rig.delivered(answer)
    rig.complete(send)
    assert committed(rig.tick(0.2)) == 3


def test_an_expired_request_is_answered_unless_a_worker_holds_it() -> None:
    rig = Rig()
    rig.workers()
    record = rig.expired("r1")
    [answer] = of(ev.Answer, rig.read(record))
    assert answer.error.code is ErrorCode.deadline_exceeded and answer.may_defer
    rig.handle(ev.AnswerDeferred(ref(record)))  # a worker has it: queued like any other
    [send] = of(ev.SendBatch, rig.tick())
    assert ids(send) == ["r1"]


def test_an_unknown_model_is_answered_at_once() -> None:
    rig = Rig()
    [answer] = of(ev.Answer, rig.read(rig.request("r1", model="other")))
    assert answer.error.code is ErrorCode.unknown_model


def test_cancelled_before_its_record_is_read_it_is_never_batched() -> None:
    rig = Rig()
    rig.workers()
    rig.handle(ev.Cancelled([("acme", "r1")]))
    [answer] = of(ev.Answer, rig.read(rig.request("r1")))
    assert answer.error.code is ErrorCode.cancelled
    assert not of(ev.SendBatch, rig.tick(1))


def test_cancelled_while_it_waits_it_leaves_its_batch() -> None:
    rig = Rig()
    rig.read(rig.request("r1"), rig.request("r2"))  # no worker: they wait max_wait
    rig.handle(ev.Cancelled([("acme", "r1")]))
    out = rig.tick(0.03)
    [send] = of(ev.SendBatch, out)
    assert ids(send) == ["r2"]
    [answer] = of(ev.Answer, out)
    assert (answer.key, answer.error.code) == (("acme", "r1"), ErrorCode.cancelled)


def test_cancelled_while_it_computes_the_worker_answers_it() -> None:
    rig = Rig()
    rig.workers()
    rig.read(rig.request("r1"))
    [send] = of(ev.SendBatch, rig.tick())
    assert rig.handle(ev.Cancelled([("acme", "r1")])) == []
    rig.complete(send)  # the worker's reply says cancelled (its claim sees the cancel)
    out = rig.tick(0.2)
    assert not of(ev.Answer, out) and committed(out) == 1


# --- workers that die, leases ---------------------------------------------------------------


def test_a_worker_dying_mid_batch_settles_it_then_sends_the_rest_in_halves() -> None:
    rig = Rig()
    rig.workers({16: {"w1"}})
    rig.read(*[rig.request(f"r{i}") for i in range(4)])
    [send] = of(ev.SendBatch, rig.tick())
    rig.workers({16: {"w1"}}, runners={send.batch.batch_id: "w1"})
    [settle] = of(ev.Settle, rig.workers({16: {"w2"}}))  # w1 stopped beating
    assert settle.dead_batch == send.batch.batch_id
    assert settle.wanted == {"t.replies.default": frozenset(("acme", f"r{i}") for i in range(4))}
    assert not of(ev.SendBatch, rig.tick(1))  # held while the reply topic is scanned
    rig.handle(ev.Settled(settle.job_id, frozenset({("acme", "r0")})))  # r0 went out
    sends = of(ev.SendBatch, rig.tick())
    assert sorted(ids(s) for s in sends) == [["r1", "r2"], ["r3"]]
    assert {s.batch.attempt for s in sends} == {2}


def test_a_batch_no_worker_started_within_its_lease_is_sent_again_whole() -> None:
    rig = Rig(lease_base_s=10)
    rig.workers()
    rig.read(rig.request("r1"), rig.request("r2"))
    [first] = of(ev.SendBatch, rig.tick())
    assert not of(ev.SendBatch, rig.tick(9.9))
    [again] = of(ev.SendBatch, rig.tick(0.2))
    assert ids(again) == ids(first) and again.batch.attempt == 1  # not the requests' fault


def test_a_generation_batch_s_lease_counts_the_tokens_it_may_generate() -> None:
    """Routing counts a generate request as its prompt plus max_tokens (its KV cache)."""
    rig = Rig(lease_base_s=10, lease_s_per_1k_tokens=10)
    rig.workers()
    rig.read(rig.request("r1", task="generate", params=GenerateParams(max_tokens=992)))  # 8+992
    [first] = of(ev.SendBatch, rig.tick())
    assert not of(ev.SendBatch, rig.tick(19.9))  # 10 s + 10 s per 1k tokens
    [again] = of(ev.SendBatch, rig.tick(0.2))
    assert ids(again) == ids(first)


def test_with_no_live_worker_for_its_bucket_a_lease_waits_and_the_log_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig(lease_base_s=10)
    rig.workers()
    rig.read(rig.request("r1"))
    of(ev.SendBatch, rig.tick())
    rig.workers({})
    with caplog.at_level(logging.WARNING):
        assert not of(ev.SendBatch, rig.tick(30))
        for _ in range(10):  # another 100 s: said again once a minute
            assert not of(ev.SendBatch, rig.tick(10))
    said = [r.getMessage() for r in caplog.records if "waits" in r.getMessage()]
    assert len(said) == 2, said
    assert "(bucket 16, 1 requests) waits 0s for a worker" in said[0]
    assert "waits 60s" in said[1] and "16: 0" in said[1]


def test_a_live_worker_keeps_its_batch_up_to_three_leases() -> None:
    rig = Rig(lease_base_s=10)
    rig.workers({16: {"w1"}})
    rig.read(rig.request("r1"), rig.request("r2"))
    [send] = of(ev.SendBatch, rig.tick())
    rig.workers({16: {"w1"}}, runners={send.batch.batch_id: "w1"})
    assert not of(ev.SendBatch, rig.tick(20.1))
    sends = of(ev.SendBatch, rig.tick(10))
    assert sorted(ids(s) for s in sends) == [["r1"], ["r2"]]  # a failed attempt: split


def test_only_an_online_batch_sent_into_a_free_place_may_be_handed_to_an_idle_worker() -> None:
    """A batch sent while its bucket's workers are all taken queues behind what Celery
    holds, in order: handed straight to a worker that just came free it would pass them."""
    rig = Rig()
    rig.workers({16: {"w1"}})  # one place
    rig.read(rig.request("r1"))
    [first] = of(ev.SendBatch, rig.tick())
    assert first.handoff
    rig.read(rig.request("r2"))
    [second] = of(ev.SendBatch, rig.tick(0.05))  # the place is taken: queued behind r1
    assert not second.handoff
    rig.complete(first)
    rig.complete(second)
    rig.read(rig.request("r3", lane="bulk"))
    [bulk] = of(ev.SendBatch, rig.tick(0.05))
    assert ids(bulk) == ["r3"] and not bulk.handoff  # bulk always queues


def test_a_batch_handed_to_a_worker_that_dies_before_it_claims_is_sent_again_at_once() -> None:
    """The worker a batch was handed to is its runner from the hand-off on: its death sends
    the batch again when it stops beating, not at the end of the lease (no claim names it
    yet: a batch killed in a worker's inbox never reached the ledger)."""
    rig = Rig(lease_base_s=30)
    rig.workers({16: {"w1", "w2"}})
    rig.read(rig.request("r1"))
    [send] = of(ev.SendBatch, rig.tick())
    rig.handle(ev.HandedOff(send.batch.batch_id, "w1"))
    [settle] = of(ev.Settle, rig.workers({16: {"w2"}}, runners={}))
    [again] = of(ev.SendBatch, rig.handle(ev.Settled(settle.job_id, frozenset())) + rig.tick())
    assert ids(again) == ["r1"]


def test_a_request_that_kills_its_worker_ends_alone_and_is_given_up_on() -> None:
    rig = Rig(max_attempts=2)
    rig.workers({16: {"w0"}})
    rig.read(*[rig.request(f"r{i}") for i in range(4)])
    queue = of(ev.SendBatch, rig.tick())
    given_up: list[ev.Answer] = []
    deaths = 0
    while queue:
        send = queue.pop(0)
        if "r2" not in ids(send):
            rig.complete(send)
        else:  # r2 kills whichever worker computes it
            deaths += 1
            runner, successor = f"w{deaths - 1}", f"w{deaths}"
            rig.workers({16: {runner}}, runners={send.batch.batch_id: runner})
            [settle] = of(ev.Settle, rig.workers({16: {successor}}))
            given_up += of(ev.Answer, rig.handle(ev.Settled(settle.job_id, frozenset())))
        queue += of(ev.SendBatch, rig.tick())
    [answer] = given_up
    assert (answer.key, answer.error.code) == (("acme", "r2"), ErrorCode.redelivery_exhausted)
    assert answer.dead_letter is not None
    assert deaths == 4  # with 4 rows, then 2, then alone twice (max_attempts)
    rig.delivered(answer)
    assert committed(rig.tick(0.2)) == 4  # its batch-mates were answered


# --- Redis away, back, lost -------------------------------------------------------------------


def test_redis_away_holds_batches_without_turning_requests_away() -> None:
    rig = Rig()
    rig.workers()
    rig.read(rig.request("r1"))
    [send] = of(ev.SendBatch, rig.tick())
    out = rig.handle(ev.BatchNotSent(send.batch.batch_id))  # the queue is Redis
    assert ev.SetPaused(TOPICS.requests(16), True) in out
    [again] = of(ev.SendBatch, rig.tick(6))  # first in line, tried on every pass ...
    assert ids(again) == ["r1"] and again.batch.attempt == 1  # ... and not counted
    rig.handle(ev.BatchNotSent(again.batch.batch_id))
    rig.handle(ev.StateUnavailable("connection refused"))  # past degrade_after_s, but
    assert not of(ev.Answer, rig.read(rig.request("r2")))  # unknown is not dead
    rig.workers()  # Redis back
    sends = of(ev.SendBatch, rig.tick(0.03))
    assert sorted(ids(s) for s in sends) == [["r1"], ["r2"]]


def test_redis_lost_its_data_what_was_answered_is_done_the_rest_goes_again() -> None:
    rig = Rig()
    rig.workers()
    rig.read(rig.request("r1"), rig.request("r2"))
    of(ev.SendBatch, rig.tick())
    [settle] = of(ev.Settle, rig.handle(ev.StateLost()))
    assert settle.dead_batch is None
    rig.handle(ev.Settled(settle.job_id, frozenset({("acme", "r1")})))
    [again] = of(ev.SendBatch, rig.tick())
    assert ids(again) == ["r2"] and again.batch.attempt == 1


def test_a_bucket_without_a_live_worker_for_degrade_after_s_answers_unavailable() -> None:
    for fallback in ("error", "queue"):
        rig = Rig(degraded_fallback=fallback)
        rig.workers()
        rig.workers({16: set(), 32: set()})  # its workers are gone
        rig.tick(5.1)
        answers = of(ev.Answer, rig.read(rig.request("r1")))
        if fallback == "queue":
            assert not answers
        else:
            [answer] = answers
            assert answer.error is not None and answer.error.code is ErrorCode.unavailable
            assert "no live worker" in answer.error.message


def test_at_cold_start_requests_queue_until_the_first_worker_is_up() -> None:
    rig = Rig(health=HealthPolicy(degrade_after_s=5, cold_start_s=60))
    rig.workers({16: set(), 32: set()})
    rig.tick(30)  # workers still loading their model, long past degrade_after_s
    assert not of(ev.Answer, rig.read(rig.request("r1")))
    rig.workers()  # the first worker is up
    [send] = of(ev.SendBatch, rig.tick(0.03))
    assert ids(send) == ["r1"]
    late = Rig(health=HealthPolicy(degrade_after_s=5, cold_start_s=60))
    late.tick(60.1)  # none came within the cold start: none is coming
    [answer] = of(ev.Answer, late.read(late.request("r1")))
    assert answer.error is not None and answer.error.code is ErrorCode.unavailable


def test_a_bucket_whose_model_keeps_failing_answers_unavailable_for_a_while() -> None:
    rig = Rig()
    rig.workers()
    rig.read(*[rig.request(f"r{i}") for i in range(4)])
    [send] = of(ev.SendBatch, rig.tick())
    rig.complete(send, failed=4)  # min_requests 4, every one a model error
    [answer] = of(ev.Answer, rig.read(rig.request("r9")))
    assert answer.error.code is ErrorCode.unavailable and "failing" in answer.error.message


def test_a_request_another_attempt_holds_is_sent_again_after_a_backoff_not_its_lease() -> None:
    rig = Rig()
    rig.workers()
    rig.read(rig.request("held"), rig.request("free"))
    [send] = of(ev.SendBatch, rig.tick(0.05))
    done = [i.ref for i in send.batch.items if i.request.request_id == "free"]
    deferred = [i.ref for i in send.batch.items if i.request.request_id == "held"]
    rig.handle(
        ev.CompletionsRead([Completion(batch_id=send.batch.batch_id, done=done, deferred=deferred)])
    )
    assert of(ev.SendBatch, rig.tick(0.1)) == []  # not at once: the other attempt is at it
    [again] = of(ev.SendBatch, rig.tick(0.2))  # 0.25 s later, well before the 10 s lease
    assert ids(again) == ["held"] and again.batch.attempt == 1  # a deferral is no failure
    rig.handle(
        ev.CompletionsRead([Completion(batch_id=again.batch.batch_id, done=[], deferred=deferred)])
    )
    assert of(ev.SendBatch, rig.tick(0.3)) == []  # the backoff doubles
    [third] = of(ev.SendBatch, rig.tick(0.25))
    rig.complete(third)
    assert rig.core.flights.waiting_count() == 0
    commits = of(ev.Commit, rig.tick(0.2))
    assert commits and max(commits[-1].offsets.values()) == 2  # both records done


def test_requests_answered_while_no_dispatcher_held_them_are_done_at_once() -> None:
    rig = Rig()
    rig.workers()
    records = [rig.request(f"r{i}") for i in range(4)]
    answered = frozenset({("acme", "r0"), ("acme", "r2")})  # the ledger says so
    polled = {records[0].tp: records}
    out = rig.handle(ev.RecordsRead(polled, rig.wall, answered))
    out += rig.tick(0.05)
    [send] = of(ev.SendBatch, out)
    assert ids(send) == ["r1", "r3"]  # only the unanswered are sent again
    assert of(ev.Answer, out) == []  # and nothing is answered twice
    assert rig.core.stats.already_answered == 2
    rig.complete(send)
    commits = of(ev.Commit, rig.tick(0.2))
    assert commits and max(commits[-1].offsets.values()) == 4


def test_with_packing_a_mixed_bucket_goes_out_in_batches_of_similar_length() -> None:
    rig = Rig(pack=True, batch_overhead_tokens=4, max_batch_tokens=4096)
    lengths = [3, 16, 4, 15, 3, 16, 4, 15, 3, 16, 4, 15]
    rig.read(*[rig.request(f"r{i}", tokens=n) for i, n in enumerate(lengths)])
    sends = of(ev.SendBatch, rig.tick(0.05))  # no idle worker: at max_wait
    assert sorted(len(ids(s)) for s in sends) == [6, 6]
    assert sorted(max(s.lengths) for s in sends) == [4, 16]
    assert sum(s.padded_tokens for s in sends) == 6 * 4 + 6 * 16  # arrival order: 12 x 16


# --- what the core tells its observer ----------------------------------------------------------


class InFlightSeen(Observer):
    def __init__(self) -> None:
        self.seen: list[dict[int, int]] = []

    def in_flight(self, batches: Mapping[int, int]) -> None:
        self.seen.append(dict(batches))


def test_the_in_flight_gauge_is_set_when_it_moves_and_not_on_every_event() -> None:
    rig = Rig()
    seen = rig.core.observer = InFlightSeen()
    rig.workers()
    assert seen.seen == [{16: 0, 32: 0}]  # the first event sets it
    rig.tick(0.01)
    rig.read(rig.request("r1"))
    assert len(seen.seen) == 1  # nothing went out: not set again
    [send] = of(ev.SendBatch, rig.tick())
    assert seen.seen[-1] == {16: 1, 32: 0}
    rig.tick(0.01)
    assert len(seen.seen) == 2
    rig.complete(send)
    assert seen.seen[-1] == {16: 0, 32: 0} and len(seen.seen) == 3


class OutcomesSeen(Observer):
    def __init__(self) -> None:
        self.told: list[tuple[str, int]] = []

    def record(self, outcome: str, count: int = 1) -> None:
        self.told.append((outcome, count))


def test_a_polls_outcomes_are_told_once_each_with_their_counts() -> None:
    rig = Rig()
    seen = rig.core.records_in.observer = OutcomesSeen()
    rig.workers()
    rig.read(rig.request("r1"), rig.request("r2"), rig.request("r1"), rig.expired("r3"))
    assert sorted(seen.told) == [("accepted", 2), ("deadline_exceeded", 1), ("duplicate", 1)]
    rig.read(rig.request("r4"))
    assert seen.told[-1] == ("accepted", 1) and len(seen.told) == 4


def test_a_batch_carries_its_records_as_read_unless_one_left_out_created_at() -> None:
    rig = Rig()
    rig.workers()
    kept = rig.request("r1")
    fields = json.loads(rig.request("r2").value)
    del fields["created_at"]  # the dispatcher's parse gives it one; a worker's would differ
    bare = rig.raw(json.dumps(fields).encode())
    [send] = of(ev.SendBatch, rig.read(kept, bare) + rig.tick(0.05))
    body = batch_body(send.batch)
    assert kept.value.decode() in body and bare.value.decode() not in body
    again = Batch.model_validate_json(body)
    assert [i.request for i in again.items] == [i.request for i in send.batch.items]
