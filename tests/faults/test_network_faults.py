"""Network faults through a proxy the test controls (``tests/faults/proxy.py``), with
FAULT_REQUESTS (600 by default) in flight: the dispatcher cut from the broker for 10 s;
Redis answering every command 200 ms late for 20 s; S3 answering every request 2 s late
while a new worker fetches its model from it. Each: every request answered exactly once
(counted on the reply topic), no process restarted, and the pipeline serves afterwards."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from headrace.config.settings import Settings
from headrace.models.register import register
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from tests.conftest import unique_prefix
from tests.eventually import eventually
from tests.faults.harness import run_with_fault
from tests.faults.proxy import FaultProxy
from tests.models.copies import minilm_copy, upload

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CUT_S = 10.0
SLOW_S = 20.0
S3_LATE_S = 2.0


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
            # few batches out and little read ahead: most requests are still on their
            # topics when it is cut
            HEADRACE_MAX_INFLIGHT_BATCHES_PER_BUCKET="2",
            HEADRACE_FAIR_READ_AHEAD_TOKENS="64",
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


def test_s3_answering_2_s_late_while_a_worker_loads_its_model(
    stack: LocalStack, tmp_path: Path
) -> None:
    """The pipeline serves a registered version whose files are in S3 (two workers, loaded
    before the fault). Then S3 answers every request 2 s late (the proxy: each answer starts
    late, bodies stream at full speed) while a third worker with an empty model cache starts
    and fetches the version through it: the two serve on, the third loads (slowly, within
    its limit) and joins without a restart."""
    state, sql_url = tmp_path / "state", f"sqlite:///{tmp_path}/registry.db"
    model = f"enc-{uuid.uuid4().hex[:6]}"
    base = Settings(sql_url=sql_url, state_dir=state)
    register(base, model, str(upload(base, minilm_copy(tmp_path / "model"))), "v1")
    s3_port = base.port_of(base.s3_endpoint_url)
    with FaultProxy(("127.0.0.1", s3_port)) as proxy:
        joining: dict[str, float] = {}

        def slow_s3_and_a_new_worker(pipeline: Pipeline) -> None:
            proxy.slow(S3_LATE_S)
            joining["started"] = time.monotonic()
            pipeline.add_worker(
                env={
                    "HEADRACE_S3_ENDPOINT_URL": f"http://{proxy.address}",
                    "HEADRACE_STATE_DIR": str(tmp_path / "another-machine"),
                },
                wait=False,
            )

        def loaded_then_heal(pipeline: Pipeline) -> None:
            worker = pipeline.workers[-1]

            def ready() -> bool:
                if not worker.alive():
                    raise RuntimeError(f"the new worker ended: exit {worker.exit_code}")
                return worker.ready()

            eventually(ready, 240, "the new worker ready", every_s=0.2)
            joining["ready_s"] = time.monotonic() - joining["started"]
            proxy.heal()

        outcome = run_with_fault(
            "S3 answering 2 s late while a worker loads its model",
            unique_prefix("slow-s3"),
            slow_s3_and_a_new_worker,
            loaded_then_heal,
            seed=11,
            client_settings={"model": model, "sql_url": sql_url, "state_dir": state},
            HEADRACE_MODEL=model,
            HEADRACE_SQL_URL=sql_url,
            HEADRACE_STATE_DIR=str(state),
        )
    fetches = proxy.delayed
    print(outcome)
    print(f"the new worker was ready {joining['ready_s']:.1f} s after it started; "
          f"{fetches} S3 answers came {S3_LATE_S} s late")  # fmt: skip
    # it did fetch through the slow store: a listing and the version's files, each 2 s late
    assert fetches >= 3 and joining["ready_s"] >= 3 * S3_LATE_S
