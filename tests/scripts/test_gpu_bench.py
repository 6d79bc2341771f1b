"""scripts/gpu_bench.py measures on a lent GPU; ``--device cpu --quick`` runs the same code here
(smaller sizes, transformers' own continuous batching left out), with pydantic made
unimportable, as on the GPU machine, so that it cannot rot between lent GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scripts.without_pydantic import quick_report


@pytest.mark.timeout(300)
def test_gpu_bench_runs_on_cpu_without_pydantic(tmp_path: Path) -> None:
    report = quick_report("gpu_bench.py", tmp_path / "report.json", timeout_s=280)
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
