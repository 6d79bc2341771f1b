"""The local pipeline's worker layout (no processes started)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from headrace.ops.processes import Pipeline, local_pipeline, local_workers, worker_env


@pytest.mark.skipif(torch.cuda.is_available(), reason="on CUDA one worker per device")
def test_on_cpu_one_worker_per_core_with_one_torch_thread(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    assert local_workers("cpu") == local_workers("auto") == cores
    env = {"HEADRACE_TOPIC_PREFIX": "layout", "HEADRACE_STATE_DIR": str(tmp_path)}
    pipeline = local_pipeline(env, "cpu", None)
    assert len(pipeline.workers) == cores
    if cores > 1:
        assert all(w.env["HEADRACE_TORCH_THREADS"] == "1" for w in pipeline.workers)
    assert all(w.args == ["worker", "--buckets", "all"] for w in pipeline.workers)


def test_torch_threads_set_means_one_worker_as_configured() -> None:
    assert local_workers("cpu", torch_threads=2) == 1
    assert worker_env(1) == {}
    assert worker_env(2) == {"HEADRACE_TORCH_THREADS": "1"}


def test_worker_env_reaches_workers_only(tmp_path: Path) -> None:
    pipeline = Pipeline(
        env={"HEADRACE_TOPIC_PREFIX": "layout"},
        worker_buckets=["all", "16"],
        log_dir=tmp_path,
        worker_env={"HEADRACE_TORCH_THREADS": "1"},
    )
    assert [w.env["HEADRACE_TORCH_THREADS"] for w in pipeline.workers] == ["1", "1"]
    assert pipeline.workers[1].args == ["worker", "--buckets", "16"]
    assert pipeline.dispatcher.env.get("HEADRACE_TORCH_THREADS") == os.environ.get(
        "HEADRACE_TORCH_THREADS"
    )
    assert pipeline.dispatcher.env["HEADRACE_TOPIC_PREFIX"] == "layout"
    assert pipeline.workers[0].env["HEADRACE_TOPIC_PREFIX"] == "layout"
