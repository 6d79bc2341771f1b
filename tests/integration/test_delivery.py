"""Delivery contracts a user drives through the SDK: cancellation (queued and running),
deadlines checked again just before compute, degradation with recovery, producer
backpressure and the request size limit. Real stack, real dispatcher and worker processes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from headrace.config.settings import Settings
from headrace.connections import redis_client
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.schemas.errors import BackpressureError, ErrorCode, RequestTooLargeError
from headrace.schemas.messages import Reply
from headrace.workers.ledger import RedisLedger
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(240)

SLOW = "<<slow>>"
POISON = "<<poison>>"


def code(reply: Reply) -> ErrorCode | None:
    return reply.error.code if reply.error is not None else None


@pytest.fixture(scope="module")
def workerless() -> Iterator[tuple[Pipeline, Settings]]:
    """A dispatcher whose workers the test starts itself."""
    prefix = unique_prefix("delivery")
    env = pipeline_env(
        prefix,
        HEADRACE_DEGRADE_AFTER_S="1",
        HEADRACE_COLD_START_S="1",  # no worker is coming until the test starts one
        HEADRACE_FAULT_SLOW_MARKER=SLOW,
        HEADRACE_FAULT_POISON_MARKER=POISON,
        HEADRACE_BREAKER_MIN_REQUESTS="10",
        HEADRACE_BREAKER_COOLDOWN_S="3",
        HEADRACE_WORKER_HEARTBEAT_S="0.5",
    )
    with Pipeline(env=env, worker_buckets=[]) as pipeline:
        yield pipeline, Settings(topic_prefix=prefix)


def test_degradation_without_workers_then_recovery_then_breaker(
    stack: LocalStack, workerless: tuple[Pipeline, Settings]
) -> None:
    pipeline, settings = workerless
    with Client(settings, tenant="delivery") as client:
        time.sleep(1.5)  # past degrade_after_s with no worker
        started = time.monotonic()
        reply = client.submit("nobody can compute this").result(30)
        assert code(reply) is ErrorCode.unavailable
        assert "no live worker" in reply.error.message if reply.error else False
        assert time.monotonic() - started < 5  # fast, not after a lease

        pipeline.add_worker("all")

        def served() -> Reply | None:
            reply = client.submit("served again?").result(60)
            return None if code(reply) is ErrorCode.unavailable else reply

        reply = eventually(served, 15, "the bucket served after a worker came back", every_s=0.3)
        assert reply.result is not None

        poisoned = [
            r.result(60) for r in client.submit_many([f"bad {i} {POISON}" for i in range(12)])
        ]
        assert {code(r) for r in poisoned} == {ErrorCode.model_error}

        def tripped() -> Reply | None:  # once the dispatcher has read the completions
            reply = client.submit("a good request while the bucket is failing").result(30)
            return reply if code(reply) is ErrorCode.unavailable else None

        refused = eventually(tripped, 10, "the breaker open", every_s=0.2)
        assert refused.error is not None and "failing" in refused.error.message
        eventually(  # cooldown: half-open
            lambda: client.submit("a good request after the cooldown").result(60).result,
            15,
            "a good request served after the cooldown",
            every_s=0.5,
        )


def test_cancel_queued_and_deadline_checked_before_compute(stack: LocalStack) -> None:
    prefix = unique_prefix("cancel")
    env = pipeline_env(prefix, HEADRACE_DEGRADED_FALLBACK="queue")
    settings = Settings(topic_prefix=prefix)
    with (
        Pipeline(env=env, worker_buckets=[]) as queued,
        Client(settings, tenant="delivery") as client,
    ):
        keep_a, cancel_me, keep_b = client.submit_many(["keep a", "cancel me", "keep b"])
        late = client.submit("too late by the time a worker sees it", timeout_s=1.0)
        client.cancel(cancel_me.request.request_id)
        time.sleep(2.0)  # dispatched to a queue no worker reads; deadline passes meanwhile
        queued.add_worker("all")
        assert keep_a.result(60).result is not None and keep_b.result(60).result is not None
        assert code(cancel_me.result(60)) is ErrorCode.cancelled
        assert code(late.result(60)) is ErrorCode.deadline_exceeded


def test_cancel_while_running_finishes_but_answers_cancelled(
    stack: LocalStack, workerless: tuple[Pipeline, Settings]
) -> None:
    pipeline, settings = workerless
    if not any(w.alive() for w in pipeline.workers):
        pipeline.add_worker("all")
    with Client(settings, tenant="delivery") as client:
        # the dispatcher has seen the worker: a bucket without one for degrade_after_s (1 s
        # here) is answered `unavailable` by the ladder, and a worker that just said READY
        # may not have beaten yet (seen on two xdist workers: the slow request got that)
        eventually(
            lambda: client.submit("is a worker serving?").result(30).result is not None,
            30,
            "a request answered by the new worker",
            every_s=0.2,
        )
        started = time.monotonic()
        running = client.submit(f"this one takes a while {SLOW}")
        ledger = RedisLedger(redis_client(settings), settings.topic_prefix, 60)
        eventually(  # claimed by a worker: computing (the slow marker holds it 3 s)
            lambda: ledger.holders([("delivery", running.request.request_id)])[0],
            30,
            "the slow request claimed by a worker",
            every_s=0.05,
        )
        client.cancel(running.request.request_id)
        reply = running.result(60)
        assert code(reply) is ErrorCode.cancelled
        assert time.monotonic() - started >= 3.0  # it ran to the end first


def test_backpressure_raises_or_blocks_with_timeout(stack: LocalStack) -> None:
    prefix = unique_prefix("pressure")  # no dispatcher: nothing is ever answered
    raising = Settings(topic_prefix=prefix, client_max_pending=3, client_on_full="raise")
    with Client(raising, tenant="delivery") as client:
        client.submit_many(["one", "two", "three"])
        with pytest.raises(BackpressureError, match="client_max_pending"):
            client.submit("four")
    blocking = Settings(
        topic_prefix=prefix,
        client_max_pending=1,
        client_on_full="block",
        client_block_timeout_s=0.3,
    )
    with Client(blocking, tenant="delivery") as client:
        client.submit("one")
        started = time.monotonic()
        with pytest.raises(BackpressureError, match=r"within 0\.3s"):
            client.submit("two")
        assert time.monotonic() - started >= 0.3


def test_backpressure_slots_are_freed_by_replies(
    shared_pipeline: Pipeline, shared_settings: Settings
) -> None:
    settings = shared_settings.model_copy(update={"client_max_pending": 2})
    with Client(settings, tenant="delivery") as client:
        vectors = client.embed([f"text {i}" for i in range(10)], wait_s=60)
        assert len(vectors) == 10 and client.pending == 0


def test_request_size_limit_at_the_producer(stack: LocalStack) -> None:
    settings = Settings(topic_prefix=unique_prefix("size"), max_request_bytes=4096)
    with Client(settings, tenant="delivery") as client, pytest.raises(RequestTooLargeError):
        client.submit("word " * 1000, truncate=True)
