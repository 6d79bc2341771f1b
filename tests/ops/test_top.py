"""`headrace top` against a running dispatcher and worker that serve /metrics (a local
pipeline started with ``metrics``, which lists them in the state directory), with traffic
during the frame's interval."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from tests.conftest import pipeline_env, unique_prefix

pytestmark = pytest.mark.timeout(240)
CLI = [sys.executable, "-m", "headrace.ops.cli", "top"]


def test_top_shows_buckets_and_workers_of_a_running_pipeline(
    stack: LocalStack, tmp_path: Path
) -> None:
    prefix = unique_prefix("top")
    state = tmp_path / "state"
    env = pipeline_env(prefix, HEADRACE_STATE_DIR=str(state))
    with Pipeline(env=env, metrics=True) as pipeline:
        assert (state / "metrics-targets.json").exists()
        top = subprocess.Popen(
            [*CLI, "--once", "--interval-s", "5"],
            env={**os.environ, **env, "COLUMNS": "160"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with Client(Settings(topic_prefix=prefix), tenant="top") as client:
            sent = 0
            while top.poll() is None:  # traffic for as long as top watches
                texts = [f"watched by top {sent + i} " + "word " * (i % 12) for i in range(10)]
                assert len(client.embed(texts)) == len(texts)
                sent += len(texts)
        out, err = top.communicate(timeout=60)
        urls = pipeline.metrics_urls
    assert top.returncode == 0, err
    assert "per bucket" in out and "workers" in out
    lines = out.splitlines()
    [worker_line] = [line for line in lines if "all-MiniLM-L6-v2" in line]
    assert "ready" in worker_line and "MiB" in worker_line
    busy = [line for line in lines if "│" in line and _req_per_s(line) > 0]
    assert busy, out  # some bucket answered requests during the frame
    assert any(line.split("│")[8].strip() != "-" for line in busy), out  # and has a p50
    assert len(urls) == 2
    assert not (state / "metrics-targets.json").exists()  # removed when the pipeline stops


def _req_per_s(line: str) -> float:
    cells = [c.strip() for c in line.strip("│ ").split("│")]
    if len(cells) != 9 or not cells[0].isdigit():
        return 0.0
    return float(cells[4].replace(",", ""))


def test_top_without_targets_says_how_to_get_them(tmp_path: Path) -> None:
    env = {**os.environ, "HEADRACE_STATE_DIR": str(tmp_path)}
    done = subprocess.run([*CLI, "--once"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "no metrics targets" in done.stderr and "--target" in done.stderr
    assert "Traceback" not in done.stderr
