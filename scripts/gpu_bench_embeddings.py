"""The embeddings part of scripts/gpu_bench.py (which maps ``headrace`` from the checkout
before it imports this): useful tokens/s through ``EmbeddingBackend.embed`` over long-tail
texts in bucketed token-budget batches, as the dispatcher forms them, at several budgets,
beside sentence-transformers' ``encode`` on the same texts. The words its texts are made of
are the generation part's too."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import torch

from headrace.workers.backends.base import EncodedItem, default_shapes
from headrace.workers.backends.chunking import transformers_own
from headrace.workers.backends.embedding import EmbeddingBackend

BUCKETS = [16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512]
TEXT = (
    "water leaves the river through a sluice and runs down the headrace to the wheel of "
    "the mill where it turns stones that grind grain into flour for the town below"
)
WORDS = TEXT.split(" ")


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (a timer reads the wall clock after it)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def long_tail_texts(count: int, rng: random.Random) -> list[str]:
    """70% short (4-30 words), 25% medium (30-120), 5% long (120-400)."""
    out = []
    for _ in range(count):
        roll = rng.random()
        words = rng.randint(4, 30) if roll < 0.7 else rng.randint(30, 120)
        if roll >= 0.95:
            words = rng.randint(120, 400)
        out.append(" ".join(rng.choice(WORDS) for _ in range(words)))
    return out


def bucketed_batches(items: list[EncodedItem], budget: int) -> list[list[EncodedItem]]:
    """Items grouped by the smallest bucket that holds them, each bucket cut into batches of
    at most ``budget`` padded tokens (rows x bucket), as the dispatcher does."""
    by_bucket: dict[int, list[EncodedItem]] = {}
    for item in items:
        bucket = next(b for b in BUCKETS if b >= len(item.ids))
        by_bucket.setdefault(bucket, []).append(item)
    batches = []
    for bucket, group in sorted(by_bucket.items()):
        rows = max(1, budget // bucket)
        batches += [group[k : k + rows] for k in range(0, len(group), rows)]
    return batches


def bench_embeddings(model_dir: Path, device: torch.device, quick: bool) -> dict[str, Any]:
    rng = random.Random(7)
    texts = long_tail_texts(60 if quick else 12_000, rng)  # quick: the code runs, no figure
    backend = EmbeddingBackend("all-MiniLM-L6-v2", model_dir, 512, device=str(device))
    backend.load_weights()
    backend.build()
    backend.warm_up(default_shapes([16, 64, 256, 512], rows=8))
    encoded = backend.encode(texts, [True] * len(texts))
    useful = sum(item.token_count for item in encoded)
    report: dict[str, Any] = {"texts": len(texts), "useful_tokens": useful, "backend": {}}
    for budget in (256, 4096) if quick else (4096, 16_384, 65_536, 131_072):
        batches = bucketed_batches(encoded, budget)
        padded = 0
        sync(device)
        start = time.perf_counter()
        for batch in batches:
            vectors, _, batch_padded = backend.embed(batch, [True] * len(batch))
            padded += batch_padded
        sync(device)
        elapsed = time.perf_counter() - start
        assert len(vectors) == len(batch)
        report["backend"][str(budget)] = {
            "batches": len(batches),
            "useful_tok_s": round(useful / elapsed),
            "padding": round(useful / padded, 3),
            "seconds": round(elapsed, 3),
            "padded_tokens": padded,
        }
    report["batch_cost"] = batch_cost(list(report["backend"].values()))
    report["profile"] = profile_batches(backend, bucketed_batches(encoded, budget))
    sizes = (32,) if quick else (32, 128, 512)  # on CPU the larger ones took minutes
    report["sentence_transformers"] = _sentence_transformers(
        model_dir, device, texts, useful, sizes
    )
    best_st = max(
        (
            v["useful_tok_s"]
            for v in report["sentence_transformers"].values()
            if "useful_tok_s" in v
        ),
        default=None,
    )
    best = max(v["useful_tok_s"] for v in report["backend"].values())
    report["best_useful_tok_s"] = best
    report["vs_sentence_transformers_best"] = round(best / best_st, 2) if best_st else None
    return report


def profile_batches(backend: EmbeddingBackend, batches: list[list[EncodedItem]]) -> dict[str, Any]:
    """Where one batch's time goes: the batch of the shortest bucket and the one of the
    longest (of the largest budget's batches), each timed alone and then under the torch
    profiler; the operators that took the most of the host's and of the device's time."""
    from torch.profiler import ProfilerActivity, profile

    device = backend.device
    shortest, longest = batches[0], batches[-1]
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    report: dict[str, Any] = {}
    for name, batch in (("shortest_bucket", shortest), ("longest_bucket", longest)):
        normalize = [True] * len(batch)
        backend.embed(batch, normalize)  # warm
        sync(device)
        start = time.perf_counter()
        backend.embed(batch, normalize)
        sync(device)
        wall_ms = (time.perf_counter() - start) * 1e3
        with profile(activities=activities) as prof:
            backend.embed(batch, normalize)
            sync(device)
        report[name] = {
            "rows": len(batch),
            "length": max(len(item.ids) for item in batch),
            "wall_ms": round(wall_ms, 2),
            "top_host": _top(prof, "self_cpu_time_total"),
            "top_device": _top(prof, "self_device_time_total") if len(activities) > 1 else [],
        }
    return report


def _top(prof: Any, key: str, count: int = 10) -> list[list[Any]]:
    """The ``count`` operators with the most ``key`` (microseconds): name, calls, ms."""
    events = [e for e in prof.key_averages() if getattr(e, key, 0) > 0]
    events.sort(key=lambda e: getattr(e, key), reverse=True)
    return [[e.key[:60], e.count, round(getattr(e, key) / 1e3, 3)] for e in events[:count]]


def batch_cost(runs: list[dict[str, Any]]) -> dict[str, float | None]:
    """A batch's time as a fixed part plus a part per padded token, the least-squares line
    through the budgets' runs (each: its batches, padded tokens and seconds), and the fixed
    part in tokens: what ``batch_overhead_tokens`` should be on this device
    (docs/configuration.md#on-a-gpu). None where the runs cannot tell (fewer than two
    batch sizes)."""
    points = [
        (r["padded_tokens"] / r["batches"], r["seconds"] / r["batches"])
        for r in runs
        if r["batches"]
    ]
    n = len(points)
    mean_x = sum(x for x, _ in points) / n if n else 0.0
    mean_y = sum(y for _, y in points) / n if n else 0.0
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if n < 2 or sxx == 0:
        return {"fixed_ms": None, "us_per_padded_token": None, "overhead_tokens": None}
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    fixed = mean_y - slope * mean_x
    return {
        "fixed_ms": round(fixed * 1e3, 3),
        "us_per_padded_token": round(slope * 1e6, 4),
        "overhead_tokens": round(fixed / slope) if slope > 0 else None,
    }


def _sentence_transformers(
    model_dir: Path, device: torch.device, texts: list[str], useful: int, sizes: tuple[int, ...]
) -> dict[str, Any]:
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        return {"skipped": f"sentence-transformers not installed ({exc})"}
    out: dict[str, Any] = {}
    with transformers_own():  # as its users run it: transformers' layers, checks and all
        model = SentenceTransformer(str(model_dir), device=str(device))
        model.max_seq_length = 512
        if device.type == "cuda":
            model.half()
        model.encode(texts[:64], batch_size=32)  # warm up
        for size in sizes:
            sync(device)
            start = time.perf_counter()
            model.encode(texts, batch_size=size, convert_to_numpy=True)
            sync(device)
            out[str(size)] = {"useful_tok_s": round(useful / (time.perf_counter() - start))}
    return out
