"""Shared fixtures. Integration tests run against the real local stack (tansu, Redis,
SeaweedFS), a real dispatcher process and a real Celery worker process with the model."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from headrace.config.settings import Settings
from headrace.ops import processes
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from tests.sql_stores import store_url

# Workers the tests start warm each bucket up with one row, not four: the warm-up path runs
# (every bucket, its memory measured) at about a third of its cost, some 2.5 s of CPU a
# worker on 2 cores, a hundred workers a run. Set before any Settings is read.
os.environ.setdefault("HEADRACE_WARM_UP_ROWS", "1")
# The pipelines' processes (about a hundred workers and forty dispatchers a run) are forked
# from a parent that imported them once (headrace.ops.prefork): a worker is ready in about
# 1.7 s, not 6-7 s. tests/ops/test_prefork.py checks a forked child behaves as a fresh one.
processes.use_prefork()

# Property tests check what holds, never how fast: no per-example deadline and no health
# check on how long inputs take to draw (a loaded machine's pause failed one: test_seats.py
# drew its first example in 1.1 s). A test's own @settings still sets the rest.
hypothesis_settings.register_profile(
    "headrace", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
hypothesis_settings.load_profile("headrace")

__all__ = ["store_url"]  # a fixture for every SQL-store test (jobs, the model registry)
pytest_plugins = ["tests.parallel"]  # several xdist workers, safely


@pytest.fixture(scope="session")
def stack() -> Iterator[LocalStack]:
    """The local stack; started for the session if it is not already up."""
    local = LocalStack(Settings())
    started = not local.is_up()
    if started:
        local.up()
    yield local
    if started:
        local.down()


def unique_prefix(name: str) -> str:
    return f"t-{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    return unique_prefix(request.node.name[:20].replace("[", "-").replace("]", ""))


def pipeline_env(prefix: str, **extra: str) -> dict[str, str]:
    return {"HEADRACE_TOPIC_PREFIX": prefix, **extra}


@pytest.fixture(scope="session")
def shared_prefix() -> str:
    return unique_prefix("shared")


@pytest.fixture(scope="session")
def shared_settings(stack: LocalStack, shared_prefix: str) -> Settings:
    return Settings(topic_prefix=shared_prefix, max_batch_tokens=1024)


@pytest.fixture(scope="session")
def shared_pipeline(stack: LocalStack, shared_prefix: str) -> Iterator[Pipeline]:
    """One dispatcher and one worker (all buckets) shared by the end-to-end tests."""
    log_dir = Path(os.environ.get("HEADRACE_STATE_DIR", ".headrace")) / "logs" / shared_prefix
    env = pipeline_env(shared_prefix, HEADRACE_MAX_BATCH_TOKENS="1024")
    with Pipeline(env=env, log_dir=log_dir) as pipeline:
        yield pipeline


DURABLE_BROKER = "127.0.0.1:19093"  # beside the suite's in-memory one on 19092


@pytest.fixture(scope="module")
def durable_broker(
    stack: LocalStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalStack]:
    """A second tansu that keeps its log in the stack's S3 store, for restart tests."""
    state: Path = tmp_path_factory.mktemp("durable-broker")
    broker = LocalStack(
        Settings(kafka_bootstrap=DURABLE_BROKER, broker_storage="s3", state_dir=state)
    )
    broker.up(only=("kafka",))
    yield broker
    broker.down()
