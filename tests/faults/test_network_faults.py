"""Network faults through a proxy the test controls (``tests/faults/proxy.py``), with 2,000
requests in flight: the dispatcher cut from the broker for 10 s; Redis answering every
command 200 ms late for 20 s. Each: every request answered exactly once (counted on the
reply topic), no process restarted, and the pipeline serves afterwards."""

from __future__ import annotations

import time

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from tests.conftest import unique_prefix
from tests.faults.harness import run_with_fault
from tests.faults.proxy import FaultProxy

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CUT_S = 10.0
SLOW_S = 20.0


def test_the_dispatcher_cut_from_the_broker_for_10_s(stack: LocalStack) -> None:
    """Only the dispatcher reaches the broker through the proxy (kafka-python's proxy_url,
    HTTP CONNECT); the proxy holds everything for 10 s (a partition: nothing delivered,
    nothing refused), then lets it through. Workers and client are not cut. The dispatcher
    serves on from the records it had fetched; commits and heartbeats wait, the group drops
    it after its 6 s session and it joins again after the heal."""
    with FaultProxy() as proxy:

        def cut(_: Pipeline) -> None:
            assert proxy.connections > 0, "the dispatcher does not go through the proxy"
            proxy.drop()

        def heal(_: Pipeline) -> None:
            time.sleep(CUT_S)
            proxy.heal()

        outcome = run_with_fault(
            "the dispatcher cut from the broker for 10 s",
            unique_prefix("cut-broker"),
            cut,
            heal,
            seed=9,
            worker_env={"HEADRACE_KAFKA_PROXY_URL": ""},
            HEADRACE_KAFKA_PROXY_URL=f"http://{proxy.address}",
            # few batches out: most requests are still on their topics when it is cut
            HEADRACE_MAX_INFLIGHT_BATCHES_PER_BUCKET="2",
        )
        # what the cut held: fetches, commits, heartbeats (the dispatcher serves on from the
        # records it had fetched; its commits fail until the heal, and it joins again)
        assert proxy.held > 0, "the drop held nothing back: the dispatcher was not cut"
    print(outcome)


def test_redis_answering_200_ms_late_for_20_s(stack: LocalStack) -> None:
    """The dispatcher and the workers reach Redis (ledger, claims, heartbeats, the Celery
    queue) through the proxy; every answer comes 200 ms late for 20 s."""
    redis_port = Settings().port_of(Settings().redis_url)
    with FaultProxy(("127.0.0.1", redis_port)) as proxy:

        def slow(_: Pipeline) -> None:
            assert proxy.connections > 0, "nothing goes through the proxy"
            proxy.delay(0.2)

        def heal(_: Pipeline) -> None:
            time.sleep(SLOW_S)
            proxy.heal()

        outcome = run_with_fault(
            "Redis answering 200 ms late for 20 s",
            unique_prefix("slow-redis"),
            slow,
            heal,
            seed=10,
            HEADRACE_REDIS_URL=f"redis://{proxy.address}/0",
        )
    print(outcome)
