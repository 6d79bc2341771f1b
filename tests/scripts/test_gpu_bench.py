"""scripts/gpu_bench.py measures on a lent GPU; ``--device cpu --quick`` runs the same code here
(smaller sizes, transformers' own continuous batching left out), with pydantic made
unimportable, as on the GPU machine, so that it cannot rot between lent GPUs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.scripts.without_pydantic import ROOT, quick_report


def _script(name: str) -> ModuleType:
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
def test_gpu_bench_runs_on_cpu_without_pydantic(tmp_path: Path) -> None:
    report = quick_report("gpu_bench.py", tmp_path / "report.json", timeout_s=280)
    assert report["complete"] is True
    embeddings = report["embeddings"]
    assert embeddings["useful_tokens"] > 0
    assert all(
        b["useful_tok_s"] > 0 and 0 < b["padding"] <= 1 for b in embeddings["backend"].values()
    )
    # two budgets, so a batch's fixed cost is fitted (its size is the device's business)
    assert len(embeddings["backend"]) == 2
    assert isinstance(embeddings["batch_cost"]["us_per_padded_token"], float)
    # one short and one long batch profiled: their wall and the host's busiest operators
    for part in ("shortest_bucket", "longest_bucket"):
        profiled = embeddings["profile"][part]
        assert profiled["wall_ms"] > 0 and profiled["rows"] > 0 and profiled["top_host"]
    assert embeddings["profile"]["longest_bucket"]["length"] > 16
    for model in ("test_lm", "gpt2_medium_shaped"):
        generation = report["generation"][model]
        assert generation["static"]["output_tok_s"] > 0
        continuous = generation["continuous"]
        assert continuous["output_tok_s"] > 0 and continuous["decode_steps"] > 0
        assert continuous["item_calls"] == 0  # tokens reach the host by one tolist a pass
        # the other layout on the same requests: on a GPU the left-padded cache beside slots
        # with CUDA graphs; here slots, eagerly, beside the CPU's left-padded cache
        assert continuous["layout"] == "left-padded" and continuous["cuda_graphs"] is None
        # at a saturating rate: rows waited to join all through the window
        saturated = generation["continuous_saturated"]
        assert saturated["saturated"] is True and saturated["tokens"] > 0
        assert saturated["output_tok_s"] > 0 and generation["saturated_over_static"] > 0
        other = generation["continuous_other_layout"]
        assert other["layout"] == "slots" and other["output_tok_s"] > 0
        # one copy a pass (prefills are passes too: test_sampling.py counts them exactly)
        assert other["host_copies_per_step"] < 2 and other["item_calls"] == 0


def test_a_batchs_fixed_cost_is_the_line_through_the_budgets() -> None:
    """Batches of 1,000 / 4,000 / 16,000 padded tokens at 10 ms plus 2 us a token: the fit
    gives back 10 ms, 2 us and 5,000 tokens of overhead; one batch size cannot tell."""
    batch_cost = _script("gpu_bench_embeddings").batch_cost
    runs = [
        {"batches": 4, "padded_tokens": 4 * size, "seconds": 4 * (0.010 + 2e-6 * size)}
        for size in (1_000, 4_000, 16_000)
    ]
    assert batch_cost(runs) == {
        "fixed_ms": 10.0,
        "us_per_padded_token": 2.0,
        "overhead_tokens": 5000,
    }
    assert batch_cost(runs[:1])["overhead_tokens"] is None


def test_a_run_cut_off_keeps_the_parts_it_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lent GPU's time is short: the report is written as each part ends, so a run stopped
    in its second model still has the embeddings and the first model's figures."""
    bench = _script("gpu_bench")
    monkeypatch.setattr(bench, "bench_embeddings", lambda *_: {"useful_tokens": 7})

    def generation(
        device: Any, quick: bool, profiled: bool, report: dict[str, Any], save: Any
    ) -> dict[str, Any]:
        report["test_lm"] = {"continuous": {"output_tok_s": 5}}
        save()
        raise KeyboardInterrupt  # the device's time ran out in the second model

    monkeypatch.setattr(bench, "generation", generation)
    out = tmp_path / "report.json"
    args = ["--device", "cpu", "--model-dir", str(tmp_path), "--out", str(out)]
    with pytest.raises(KeyboardInterrupt):
        bench.main(args)
    saved = json.loads(out.read_text())
    assert saved["complete"] is False
    assert saved["embeddings"] == {"useful_tokens": 7}
    assert saved["generation"] == {"test_lm": {"continuous": {"output_tok_s": 5}}}
