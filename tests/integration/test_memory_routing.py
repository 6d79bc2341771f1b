"""The memory plan acts on the real pipeline: a worker given less memory than its larger
buckets need takes only the buckets whose batch of one row fits, says how many rows each
holds, and the dispatcher's batches of those buckets never pass that."""

from __future__ import annotations

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.models.registry import model_spec
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.workers.ledger import RedisLedger
from headrace.workers.memory_plan import CPU_OVERHEAD_BYTES, ModelShape, plan_model
from headrace.workers.memory_plan import estimated_activation_bytes_per_token as per_token
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_small_worker_takes_the_buckets_that_fit_and_batches_stay_within_its_plan(
    stack: LocalStack,
) -> None:
    settings = Settings(topic_prefix=unique_prefix("memplan"))
    path = model_spec(settings.model).path
    weights = ModelShape.from_model_dir(path, dtype="float32").weights
    # room for the activations of 70 tokens: 4 rows of bucket 16, none of bucket 96
    total = int((weights + CPU_OVERHEAD_BYTES + 70 * per_token(path, 4)) / 0.9) + 1
    _, plan = plan_model(
        path, "cpu", buckets=list(settings.buckets), max_batch_tokens=4096, total_bytes=total
    )
    fits = [b for b in settings.buckets if plan.bucket_rows[b] > 0]
    assert plan.bucket_rows[16] == 4 and fits == [16, 24, 32, 48, 64], plan.bucket_rows
    env = pipeline_env(settings.topic_prefix, HEADRACE_DEVICE_MEMORY_BYTES=str(total))
    with Pipeline(env=env) as pipeline, Client(settings) as client:
        ledger = RedisLedger(connections.redis_client(settings), settings.topic_prefix, 600)
        live = ledger.live_workers(list(settings.buckets), 10)
        assert [b for b in settings.buckets if live[b]] == fits
        [worker] = set().union(*live.values())
        eventually(  # the dispatcher has read the worker's plan (it logs each change)
            lambda: any(
                "worker plans read:" in line and worker in line
                for line in pipeline.dispatcher.log_path.read_text().splitlines()
            ),
            10,
            "the worker's plan read by the dispatcher",
            every_s=0.1,
        )
        replies = [s.result(60) for s in client.submit_many([f"short {i}" for i in range(40)])]
        assert all(p.alive() for p in [pipeline.dispatcher, *pipeline.workers])
    sizes = [r.batch.size for r in replies if r.batch is not None]
    assert len(sizes) == 40 and max(sizes) == 4, sizes  # 40 at once: the cap binds
