"""The autoscaling signal: seconds of work queued per bucket, learned from completions."""

from __future__ import annotations

import pytest

from headrace.schemas.messages import Completion
from headrace.workers.dispatcher import events as ev
from headrace.workers.dispatcher.workload import Workload
from tests.workers.dispatcher.rig import Rig, of


def test_before_any_batch_a_request_costs_its_bucket_at_the_prior_throughput() -> None:
    work = Workload((16, 512), prior_tokens_per_s=1000)
    assert work.seconds_per_request(16) == pytest.approx(0.016)
    assert work.queued_seconds(512, 10) == pytest.approx(5.12)


def test_a_bucket_learns_its_own_cost_and_a_cold_one_borrows_the_token_rate() -> None:
    work = Workload((16, 64), prior_tokens_per_s=1000)
    work.observe(16, compute_s=0.2, rows=10, padded_tokens=160)  # 20 ms a request
    assert work.seconds_per_request(16) == pytest.approx(0.02)
    # 64 has had no batch: 0.2 s / 160 padded tokens = 1.25 ms a token, x 64
    assert work.seconds_per_request(64) == pytest.approx(0.08)
    assert work.queued_seconds(16, 100) == pytest.approx(2.0)


def test_the_cost_follows_recent_batches() -> None:
    work = Workload((16,))
    work.observe(16, compute_s=0.1, rows=10, padded_tokens=160)
    for _ in range(30):
        work.observe(16, compute_s=0.5, rows=10, padded_tokens=160)
    assert work.seconds_per_request(16) == pytest.approx(0.05, rel=0.01)


def test_a_batch_that_computed_nothing_teaches_nothing() -> None:
    work = Workload((16,), prior_tokens_per_s=1600)
    work.observe(16, compute_s=0.0, rows=0, padded_tokens=0)  # every request a redelivery
    assert work.seconds_per_request(16) == pytest.approx(0.01)
    assert work.queued_seconds(16, -5) == 0


def test_the_core_learns_from_its_completions() -> None:
    rig = Rig(scaling_prior_tokens_per_s=1000)
    rig.workers()
    assert rig.core.queued_work_s(16, 100) == pytest.approx(1.6)
    rig.read(rig.request("r1"), rig.request("r2"))
    [send] = of(ev.SendBatch, rig.tick())
    done = [i.ref for i in send.batch.items]
    completion = Completion(
        batch_id=send.batch.batch_id, done=done, computed=2, padded_tokens=16, compute_ms=100
    )
    rig.handle(ev.CompletionsRead([completion]))
    assert rig.core.queued_work_s(16, 100) == pytest.approx(5.0)  # 50 ms a request
