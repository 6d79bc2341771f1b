"""GPU check for the CUDA path of the embedding backend (run on a lent GPU; see README).

Needs only torch, transformers and tokenizers (no pydantic, no services), so it runs on a bare
GPU machine with a copy of the model directory:

    python scripts/gpu_check.py --model-dir DIR [--out FILE]

It loads the backend on CUDA (fp16) in its three timed stages, warms up one batch per bucket,
reports torch.cuda.memory_allocated / memory_reserved, checks the CUDA embeddings against an
fp32 CPU reference (cosine >= 0.999), measures tokens/s per bucket length, and calibrates
memory: bytes per padded token from peak memory, and the max_batch_tokens a memory budget
allows.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from workers.backends.embedding import EmbeddingBackend

BUCKETS = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
TEXTS = [
    "A cat sat on the mat.",
    "Kafka topics are bucketed by sequence length so that batches waste little padding.",
    "short",
    " ".join(["a longer text about rivers, channels and the turbines they feed"] * 8),
    " ".join(["the dispatcher batches requests by their token budget"] * 20),
]


def reference(model_dir: Path, texts: list[str]) -> torch.Tensor:
    cpu = EmbeddingBackend("ref", model_dir, 512, device="cpu")
    cpu.load_weights()
    cpu.build()
    vectors = [cpu.embed(cpu.encode([t], [False]), [True])[0][0] for t in texts]
    return torch.tensor(vectors)


def throughput(backend: EmbeddingBackend, length: int, rows: int, repeats: int = 20) -> float:
    ids = torch.full((rows, length), 1000, dtype=torch.long, device=backend.device)
    mask = torch.ones_like(ids)
    backend._forward(ids, mask, normalize=True)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        backend._forward(ids, mask, normalize=True)
    torch.cuda.synchronize()
    return rows * length * repeats / (time.perf_counter() - start)


def peak_bytes(backend: EmbeddingBackend, length: int, rows: int) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    ids = torch.full((rows, length), 1000, dtype=torch.long, device=backend.device)
    backend._forward(ids, torch.ones_like(ids), normalize=True)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--memory-fraction", type=float, default=0.5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    report: dict[str, object] = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
    }
    backend = EmbeddingBackend("all-MiniLM-L6-v2", args.model_dir, 512, device="cuda")
    backend.load_weights()
    backend.build()
    backend.warm_up(BUCKETS)
    t = backend.timings
    report["load"] = {
        "load_weights_s": t.load_weights_s,
        "build_s": t.build_s,
        "warm_up_s": t.warm_up_s,
        **t.memory,
    }
    encoded = backend.encode(TEXTS, [False] * len(TEXTS))
    got, _, _ = backend.embed(encoded, [True] * len(TEXTS))
    cos = torch.nn.functional.cosine_similarity(torch.tensor(got), reference(args.model_dir, TEXTS))
    report["cosine_vs_cpu_fp32"] = {"min": float(cos.min()), "ok": bool(cos.min() >= 0.999)}
    report["tokens_per_s"] = {
        str(length): round(throughput(backend, length, max(1, 16384 // length)))
        for length in (16, 64, 128, 512)
    }
    per_token = {
        str(length): peak_bytes(backend, length, max(1, 32768 // length)) / 32768
        for length in (32, 128, 512)
    }
    report["activation_bytes_per_padded_token"] = per_token
    free, total = torch.cuda.mem_get_info()
    budget = args.memory_fraction * free
    worst = max(per_token.values())
    report["calibration"] = {
        "free_bytes": free,
        "total_bytes": total,
        "memory_fraction": args.memory_fraction,
        "max_batch_tokens_for_budget": int(budget / worst),
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if report["cosine_vs_cpu_fp32"]["ok"] else 1  # type: ignore[index]


if __name__ == "__main__":
    raise SystemExit(main())
