"""scripts/gpu_bench.py measures on a lent GPU; ``--device cpu --quick`` runs the same code here
(smaller sizes, transformers' own continuous batching left out), with pydantic made
unimportable, as on the GPU machine, so that it cannot rot between lent GPUs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from headrace.models.registry import model_spec

ROOT = Path(__file__).resolve().parents[2]
RUN = """
import runpy, sys
sys.modules["pydantic"] = None  # import pydantic now fails
sys.argv = ["gpu_bench.py", *sys.argv[1:]]
runpy.run_path("scripts/gpu_bench.py", run_name="__main__")
"""


@pytest.mark.timeout(300)
def test_gpu_bench_runs_on_cpu_without_pydantic(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    model_dir = str(model_spec("all-MiniLM-L6-v2").path)
    args = ["--device", "cpu", "--quick", "--model-dir", model_dir, "--out", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", RUN, *args], cwd=ROOT, capture_output=True, text=True, timeout=280
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    embeddings = report["embeddings"]
    assert embeddings["useful_tokens"] > 0
    assert all(
        b["useful_tok_s"] > 0 and 0 < b["padding"] <= 1 for b in embeddings["backend"].values()
    )
    for model in ("test_lm", "gpt2_medium_shaped"):
        generation = report["generation"][model]
        assert generation["static"]["output_tok_s"] > 0
        continuous = generation["continuous"]
        assert continuous["output_tok_s"] > 0 and continuous["decode_steps"] > 0
        assert continuous["item_calls"] == 0  # tokens reach the host by one tolist a pass
