"""A worker whose model stops moving mid-batch (a forward pass that never ends: a hung kernel,
a deadlocked loop) while it keeps beating. Before the stall watch it held its batch's claims
for good and the dispatcher waited out three leases before sending the batch on, where the
new attempt deferred to the live claims again. Now the worker exits (code 87) once its pass
has run worker_stall_s, and its requests are answered by another worker, each once."""

from __future__ import annotations

import time

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.workers.stall_watch import STALL_EXIT_CODE
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.faults.harness import answered_once_after_replacement

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

STALL = "<<stall>>"
STALL_S = 3.0


def test_a_worker_whose_model_hangs_exits_and_its_requests_are_answered_elsewhere(
    stack: LocalStack,
) -> None:
    prefix = unique_prefix("stall")
    settings = Settings(topic_prefix=prefix)
    env = pipeline_env(prefix, HEADRACE_WORKER_HEARTBEAT_S="0.5")
    with (
        Pipeline(env=env, worker_buckets=[]) as pipeline,
        Client(settings, tenant="stall") as client,
    ):
        stalling = pipeline.add_worker(
            "all",
            env={"HEADRACE_FAULT_STALL_MARKER": STALL, "HEADRACE_WORKER_STALL_S": str(STALL_S)},
        )
        texts = [f"the one whose pass never ends {STALL}"] + [f"a batch-mate {i}" for i in range(6)]
        submissions = client.submit_many(texts)
        stalled = submissions[0]
        eventually(lambda: stalling.exit_code() is not None, 60, "the stalled worker's exit")
        exited_at = time.monotonic()
        # the fault landed with requests in flight: the hung request was taken and not
        # answered, and the worker ended itself with the watch's code
        assert stalling.exit_code() == STALL_EXIT_CODE, stalling.log_path.read_text()[-3000:]
        assert not stalled.future.done()
        held = sum(not s.future.done() for s in submissions)
        log = stalling.log_path.read_text()
        assert "injected stall" in log and "without one ending" in log and "in _inject" in log
        print(f"stalled worker exited with {held} of {len(texts)} requests unanswered")

        pipeline.add_worker("all")  # a healthy one (as a supervisor would start)
        ready_s, answered_s = answered_once_after_replacement(
            pipeline,
            client,
            submissions,
            f"a worker's forward pass hangs (worker_stall_s {STALL_S:g}; s: after a new worker)",
            exited_at,
            tenant="stall",
        )
    print(
        f"a healthy worker ready {ready_s:.1f}s after the stalled one exited; "
        f"all answered {answered_s:.2f}s after it was ready"
    )
