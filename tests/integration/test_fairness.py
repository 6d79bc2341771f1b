"""Fair share on the real pipeline: a quiet tenant's requests that come after a noisy
tenant's flood are answered long before the flood is; with arrival order
(``HEADRACE_FAIR_SHARE=false``, the control) they wait behind all of it.

The bound is measured in the same run: a quiet request's latency against what was left of
the flood when it was sent (the time from it to the flood's last reply)."""

from __future__ import annotations

import time

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
FLOOD = 800  # about 7 s of work on 2 cores: long beside a quiet request (~0.4 s)
QUIET = 5


def quiet_share_of_the_flood(fair: bool) -> float:
    """The slowest quiet request's latency as a share of the flood left when it was sent."""
    prefix = unique_prefix("fair" if fair else "fifo")
    tokens = "256"  # small batches: the flood is many of them
    env = pipeline_env(
        prefix, HEADRACE_MAX_BATCH_TOKENS=tokens, HEADRACE_FAIR_SHARE=str(fair).lower()
    )
    settings = Settings(topic_prefix=prefix, max_batch_tokens=int(tokens))
    with (
        Pipeline(env=env) as pipeline,
        Client(settings, tenant="noisy") as noisy,
        Client(settings, tenant="quiet") as quiet,
    ):
        noisy.embed(["warm"])
        flood = noisy.submit_many([f"the flood, line {i} about the mill" for i in range(FLOOD)])
        eventually(  # it is flowing, ahead of the quiet
            lambda: sum(s.future.done() for s in flood) >= 50, 120, "the flood", every_s=0.01
        )
        sent_at = time.perf_counter()
        left_when_sent = sum(not s.future.done() for s in flood)
        latencies = []
        for i in range(QUIET):
            began = time.perf_counter()
            reply = quiet.submit(f"a quiet question {i}").result(120)
            assert reply.result is not None, reply.error
            latencies.append(time.perf_counter() - began)
        for submission in flood:
            assert submission.result(240).result is not None
        flood_left_s = time.perf_counter() - sent_at
        assert all(p.alive() for p in [pipeline.dispatcher, *pipeline.workers])
    share = max(latencies) / flood_left_s
    print(
        f"fair={fair}: quiet latencies {[round(x * 1000) for x in latencies]} ms; the flood "
        f"had {left_when_sent} of {FLOOD} left, answered {flood_left_s:.2f} s after the "
        f"first quiet request: share {share:.2f}"
    )
    return share


def test_a_quiet_tenant_is_not_queued_behind_a_noisy_tenants_flood(stack: LocalStack) -> None:
    assert quiet_share_of_the_flood(fair=True) < 0.25


def test_in_arrival_order_the_quiet_tenant_waits_for_the_flood(stack: LocalStack) -> None:
    """The control: the same run without fair share fails the bound above."""
    assert quiet_share_of_the_flood(fair=False) >= 0.25
