"""Loading that really times out: a stage past its limit ends the worker process with the
stage's exit code and a load record naming the stage (no thread left hanging in a live
process), and the supervisor starts it again with a growing backoff; a registered version
whose weights changed by one byte is refused, naming the file."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from headrace import connections
from headrace.config.settings import Settings
from headrace.models.register import register
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.workers.loading import EXIT_CHECKSUM, EXIT_TIMEOUT, LoadRecords, Stage, Watchdog
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.models.copies import minilm_copy

pytestmark = pytest.mark.timeout(300)


def test_the_watchdog_calls_its_timeout_only_past_the_limit() -> None:
    fired: list[tuple[Stage, float]] = []
    dog = Watchdog(lambda stage, limit: fired.append((stage, limit)))
    assert dog.run(Stage.build, lambda: None, 5.0) < 1.0
    release = threading.Event()
    dog.run(Stage.warm_up, lambda: release.wait(0.5), 0.1)
    assert fired == [(Stage.warm_up, 0.1)]


def worker(env: dict[str, str], timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headrace.ops.cli", "worker", "--buckets", "16"],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_a_hanging_warm_up_ends_the_process_with_its_exit_code_and_record(
    stack: LocalStack, tmp_path: Path
) -> None:
    import os

    prefix = unique_prefix("hang")
    env = {
        **os.environ,
        **pipeline_env(prefix),
        "HEADRACE_FAULT_HANG_STAGE": "warm_up",
        "HEADRACE_WARM_UP_TIMEOUT_S": "2",
    }
    started = time.monotonic()
    done = worker(env)
    took = time.monotonic() - started
    assert done.returncode == EXIT_TIMEOUT[Stage.warm_up] == 83, done.stderr[-2000:]
    assert "stage 'warm_up' ran past its 2s limit (exit 83)" in done.stderr
    print(f"hung warm-up: process ended {took:.1f}s after it started (limit 2 s)")
    [record] = LoadRecords(connections.redis_client(Settings()), prefix).recent()
    assert (record.stage, record.outcome, record.exit_code) == ("warm_up", "timeout", 83)
    assert set(record.seconds) == {"load_weights", "build"}  # the stages that finished


def test_a_changed_weight_file_is_refused_naming_it(stack: LocalStack, tmp_path: Path) -> None:
    import os

    settings = Settings(sql_url=f"sqlite:///{tmp_path}/registry.db", state_dir=tmp_path / "state")
    folder = minilm_copy(tmp_path / "enc")
    model = f"enc-{uuid.uuid4().hex[:6]}"
    register(settings, model, str(folder), "v1")
    with open(folder / "model.safetensors", "r+b") as handle:
        handle.seek(2_000_000)
        handle.write(b"\x00\x01")
    env = {
        **os.environ,
        **pipeline_env(unique_prefix("checksum")),
        "HEADRACE_MODEL": model,
        "HEADRACE_SQL_URL": settings.sql_url,
        "HEADRACE_STATE_DIR": str(settings.state_dir),
    }
    done = worker(env)
    assert done.returncode == EXIT_CHECKSUM == 4, done.stderr[-2000:]
    assert "model.safetensors has sha256" in done.stderr
    assert f"{model}:v1" in done.stderr


def test_the_supervisor_starts_a_worker_that_timed_out_again_with_growing_delays(
    stack: LocalStack,
) -> None:
    prefix = unique_prefix("supervised")
    env = pipeline_env(prefix)
    # the first stage hangs: each start ends before the model is read (seconds, not tens)
    hang = {"HEADRACE_FAULT_HANG_STAGE": "load_weights", "HEADRACE_LOAD_WEIGHTS_TIMEOUT_S": "1"}
    with Pipeline(env=env, worker_buckets=[], supervise=True) as pipeline:
        assert pipeline.supervisor is not None
        pipeline.add_worker("16", env=hang, wait=False)
        eventually(lambda: len(pipeline.supervisor.restarts) >= 3, 120, "3 restarts", every_s=0.2)
        restarts = list(pipeline.supervisor.restarts)
    assert {r.exit_code for r in restarts} == {EXIT_TIMEOUT[Stage.load_weights]}, restarts
    delays = [r.delay_s for r in restarts]
    assert delays[:3] == [1.0, 2.0, 4.0], restarts
