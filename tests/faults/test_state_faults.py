"""Restart Redis and lose its data (Celery queues, claims, completion notices, answered marks)
with requests in flight: Kafka is the truth, so every request is still answered exactly once."""

from __future__ import annotations

import pytest

from headrace.ops.localstack import LocalStack
from tests.conftest import unique_prefix
from tests.faults.harness import run_with_fault

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.mark.exclusive  # every test uses this Redis
def test_redis_restarted_empty_mid_run(stack: LocalStack) -> None:
    run_with_fault(
        "restart Redis, losing its data",
        unique_prefix("redis-loss"),
        lambda _: stack.stop_service("redis"),  # no persistence: everything in it is gone
        lambda _: stack.up(only=("redis",)),
        seed=7,
    )
