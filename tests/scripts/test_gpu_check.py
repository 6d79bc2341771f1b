"""scripts/gpu_check.py runs only where a GPU is lent; its code path runs here on CPU
(``--device cpu --quick``) so that it cannot rot between lent GPUs, and with pydantic made
unimportable, since the GPU machine may not have it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.scripts.without_pydantic import ROOT, quick_report


def test_gpu_check_runs_on_cpu_without_pydantic(tmp_path: Path) -> None:
    report = quick_report("gpu_check.py", tmp_path / "report.json", timeout_s=240)
    assert report["embedding"]["cosine_vs_cpu_fp32"]["min"] >= 0.999
    assert all(rate > 0 for rate in report["embedding"]["tokens_per_s"].values())
    generation = report["generation"]
    assert "TEST MODEL" in generation["model"]
    c = generation["correctness"]
    # on CPU in fp32 the batch path is exact: every left-padded row decodes as it does alone
    assert c["greedy_rows_equal_alone"] == c["rows"] == 6
    assert c["greedy_prefix_share_vs_cpu_fp32"] == 1.0
    assert c["greedy_repeatable"] and c["seeded_repeatable"] and c["seeded_row_equals_alone"]
    assert all(d["generated_tokens"] > 0 for d in generation["decode"].values())
    plan = generation["memory_plan"]
    assert plan["estimated"]["max_sequences"] > 0
    assert plan["measured"]["used"] is False  # no CUDA figures on CPU
    assert plan["bucket_rows_measured"]["16"] >= plan["bucket_rows_measured"]["384"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the check runs for real")
def test_gpu_check_says_so_without_cuda() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/gpu_check.py", "--only", "generation"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "no CUDA device" in done.stdout
