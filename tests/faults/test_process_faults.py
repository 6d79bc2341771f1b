"""kill -9 a worker, kill -9 the dispatcher: with requests in flight, every request is
answered exactly once (counted on the reply topic) and the pipeline serves afterwards."""

from __future__ import annotations

import pytest

from headrace.ops.localstack import LocalStack
from tests.conftest import unique_prefix
from tests.faults.harness import run_with_fault

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_worker_killed_mid_run(stack: LocalStack) -> None:
    run_with_fault(
        "kill -9 a worker (1 of 2)",
        unique_prefix("kill-worker"),
        lambda p: p.workers[0].kill(),  # mid-batch: its claims and its batch die with it
        lambda p: p.workers[0].start(),  # as a supervisor would
        worker_buckets=["all", "all"],
        HEADRACE_TORCH_THREADS="1",
    )


def test_dispatcher_killed_mid_run(stack: LocalStack) -> None:
    run_with_fault(
        "kill -9 the dispatcher",
        unique_prefix("kill-dispatcher"),
        lambda p: p.dispatcher.kill(),
        lambda p: p.dispatcher.start(),
        seed=6,
    )
