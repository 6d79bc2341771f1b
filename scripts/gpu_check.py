"""GPU check for the torch CUDA paths (run on a lent GPU; see README).

    python scripts/gpu_check.py --model-dir DIR [--out FILE] [--only embedding|generation]

Needs only torch, transformers, tokenizers and safetensors (no pydantic, no services), so it
runs on a bare GPU machine with a copy of the all-MiniLM-L6-v2 directory and this repository.

- embedding (scripts/gpu_embedding.py): the backend in fp16 in its three timed stages,
  ``memory_allocated``/``memory_reserved`` after warm-up, cosine against an fp32 CPU
  reference, tokens/s per length, bytes per padded token and the batch budget they allow;
- generation (scripts/gpu_generation.py): headrace-test-lm (a TEST MODEL, built into a temp
  directory) on the transformers backend: greedy rows batched with left padding against each
  row alone and against fp32 CPU, seeded sampling repeatable, decode tokens/s, and the memory
  plan from the figures warm-up measured beside the estimated one.

``--device cpu --quick`` runs the same code on CPU in seconds (tests/scripts keeps it working).
Exit status 0 when every check passed, 1 when one failed, 2 without a CUDA device.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_embedding import check_embedding
from gpu_generation import check_generation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", type=Path, help="all-MiniLM-L6-v2 (for embedding)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", choices=["embedding", "generation"])
    parser.add_argument("--quick", action="store_true", help="smaller shapes (a smoke run)")
    parser.add_argument("--memory-fraction", type=float, default=0.5)
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    report: dict[str, Any] = {"device": args.device, "torch": torch.__version__}
    if args.device.startswith("cuda"):
        report["device"] = torch.cuda.get_device_name(0)
    if args.only != "generation":
        if args.model_dir is None:
            parser.error("--model-dir is needed for the embedding check")
        report["embedding"] = check_embedding(
            args.model_dir, args.device, args.memory_fraction, args.quick
        )
    if args.only != "embedding":
        report["generation"] = check_generation(args.device, args.quick)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.out:
        args.out.write_text(text)
    checks = [v["ok"] for v in report.values() if isinstance(v, dict)]
    return 0 if all(checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
