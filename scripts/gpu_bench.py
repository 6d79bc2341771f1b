"""Every GPU figure of issue 35 in one run (about 4 minutes on an H200):

    python scripts/gpu_bench.py --model-dir MINILM_DIR [--out FILE] [--device cuda]
    python scripts/gpu_bench.py --device cpu --quick --model-dir DIR   # the same code, in CI

- **embeddings**: useful tokens/s through ``EmbeddingBackend.embed`` (vectors on the host as
  float32) over a long-tail set of texts in bucketed token-budget batches, as the dispatcher
  forms them, at several budgets; beside sentence-transformers' ``encode`` on the same texts
  at batch sizes 32/128/512 (fp16 both);
- **generation**: static against continuous batching through ``GenerationBackend`` on the
  test LM and on a random-weight GPT-2 shaped like gpt2-medium (n_embd 1024, 24 layers, 16
  heads, ~300M parameters, built here from the test LM's tokenizer), with the bench's mix
  (90% max_tokens 16, 10% 256; half greedy, half sampled) all submitted at once; beside
  transformers' own continuous batching (``generate_batch``) on the same model; the
  continuous loop again at a saturating rate (callers handing the mix in over and over,
  tokens counted over a 4 s window: no tail of long rows decoding alone); host copies
  (``tolist``/``item``) per decode step; peak memory.

The embeddings part is in gpu_bench_embeddings.py, the generation part in
gpu_bench_generation.py. Needs torch, transformers, tokenizers, safetensors (and
sentence-transformers for its row); no pydantic and no services: on a machine where
headrace is not installed, the package is mapped from this checkout. Prints one JSON
report; ``--out`` writes it again as each part ends (``complete`` false until the last),
so a run cut off keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent


def _map_headrace() -> None:
    """``headrace`` from this checkout when it is not installed (src/headrace, and the
    layout's top folders mapped into it as setup.py does); its ``__init__`` (which needs
    pydantic) is not run."""
    try:
        import headrace.workers.backends.generation  # noqa: F401

        return
    except ImportError:
        pass
    for name in [n for n in sys.modules if n == "headrace" or n.startswith("headrace.")]:
        del sys.modules[name]
    root = types.ModuleType("headrace")
    root.__path__ = [str(ROOT / "src" / "headrace")]
    sys.modules["headrace"] = root
    for top in ("producers", "workers", "consumers", "schemas"):
        sub = types.ModuleType(f"headrace.{top}")
        sub.__path__ = [str(ROOT / top)]
        sys.modules[f"headrace.{top}"] = sub
        setattr(root, top, sub)


_map_headrace()

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench_embeddings import bench_embeddings  # noqa: E402
from gpu_bench_generation import generation  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", type=Path, required=True, help="all-MiniLM-L6-v2")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--quick", action="store_true", help="small sizes (the CI run)")
    parser.add_argument("--only", choices=["embeddings", "generation"])
    parser.add_argument("--profile", action="store_true", help="profile the ~300M model's loop")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("no CUDA device")
        return 2
    report: dict[str, Any] = {"torch": torch.__version__, "device": str(device)}
    if device.type == "cuda":
        report["device"] = torch.cuda.get_device_name(0)
    started = time.perf_counter()
    report["complete"] = False

    def save() -> None:
        """The report so far, written again as each part ends: a lent GPU's run that is cut
        off (its time is short) keeps what it measured."""
        report["seconds"] = round(time.perf_counter() - started, 1)
        if args.out:
            args.out.write_text(json.dumps(report, indent=2))

    sections: dict[str, Callable[[], dict[str, Any]]] = {
        "embeddings": lambda: bench_embeddings(args.model_dir, device, args.quick),
        "generation": lambda: generation(
            device, args.quick, args.profile, report.setdefault("generation", {}), save
        ),
    }
    for name, run in sections.items():
        if args.only in (None, name):
            report[name] = run()
            save()
            print(json.dumps({name: report[name]}, indent=1), flush=True)
    report["complete"] = True
    save()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
