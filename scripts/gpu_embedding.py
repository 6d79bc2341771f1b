"""The embedding part of the GPU check (scripts/gpu_check.py): all-MiniLM-L6-v2 on a device
in its three timed stages, its embeddings against an fp32 CPU reference, tokens/s per bucket
length and, on CUDA, the memory a padded token costs and the batch budget that leaves.

Needs only torch and tokenizers (no pydantic, no services).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from headrace.workers.backends.base import default_shapes
from headrace.workers.backends.embedding import EmbeddingBackend

BUCKETS = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
TEXTS = [
    "A cat sat on the mat.",
    "Kafka topics are bucketed by sequence length so that batches waste little padding.",
    "short",
    " ".join(["a longer text about rivers, channels and the turbines they feed"] * 8),
    " ".join(["the dispatcher batches requests by their token budget"] * 20),
]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reference(model_dir: Path, texts: list[str]) -> torch.Tensor:
    cpu = EmbeddingBackend("ref", model_dir, 512, device="cpu")
    cpu.load_weights()
    cpu.build()
    vectors = [cpu.embed(cpu.encode([t], [False]), [True])[0][0] for t in texts]
    return torch.tensor(vectors)


def throughput(backend: EmbeddingBackend, length: int, rows: int, repeats: int) -> float:
    ids = torch.full((rows, length), 1000, dtype=torch.long, device=backend.device)
    mask = torch.ones_like(ids)
    backend._forward(ids, mask, normalize=True)
    _sync(backend.device)
    start = time.perf_counter()
    for _ in range(repeats):
        backend._forward(ids, mask, normalize=True)
    _sync(backend.device)
    return rows * length * repeats / (time.perf_counter() - start)


def peak_bytes(backend: EmbeddingBackend, length: int, rows: int) -> int:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    ids = torch.full((rows, length), 1000, dtype=torch.long, device=backend.device)
    backend._forward(ids, torch.ones_like(ids), normalize=True)
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def check_embedding(
    model_dir: Path, device: str, memory_fraction: float, quick: bool = False
) -> dict[str, Any]:
    backend = EmbeddingBackend("all-MiniLM-L6-v2", model_dir, 512, device=device)
    backend.load_weights()
    backend.build()
    backend.warm_up(default_shapes(BUCKETS[:3] if quick else BUCKETS))
    t = backend.timings
    report: dict[str, Any] = {
        "load": {
            "load_weights_s": t.load_weights_s,
            "build_s": t.build_s,
            "warm_up_s": t.warm_up_s,
            **t.memory,
        }
    }
    encoded = backend.encode(TEXTS, [False] * len(TEXTS))
    got, _, _ = backend.embed(encoded, [True] * len(TEXTS))
    cos = torch.nn.functional.cosine_similarity(torch.tensor(got), reference(model_dir, TEXTS))
    report["cosine_vs_cpu_fp32"] = {"min": float(cos.min()), "ok": bool(cos.min() >= 0.999)}
    budget, repeats = (512, 2) if quick else (16384, 20)
    report["tokens_per_s"] = {
        str(length): round(throughput(backend, length, max(1, budget // length), repeats))
        for length in ((16, 64) if quick else (16, 64, 128, 512))
    }
    if backend.device.type == "cuda":
        per_token = {
            str(length): peak_bytes(backend, length, max(1, 32768 // length)) / 32768
            for length in (32, 128, 512)
        }
        report["activation_bytes_per_padded_token"] = per_token
        free, total = torch.cuda.mem_get_info()
        report["calibration"] = {
            "free_bytes": free,
            "total_bytes": total,
            "memory_fraction": memory_fraction,
            "max_batch_tokens_for_budget": int(memory_fraction * free / max(per_token.values())),
        }
    report["ok"] = report["cosine_vs_cpu_fp32"]["ok"]
    return report
