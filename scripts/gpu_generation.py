"""The generation part of the GPU check (scripts/gpu_check.py): the transformers backend on a
device with headrace-test-lm (a TEST MODEL: random weights, gibberish text), and the memory
planner fed with what warm-up measured there.

Needs torch, transformers, tokenizers and safetensors; no pydantic, no services.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from headrace.models import tiny_lm
from headrace.workers.backends.base import EncodedItem, FixedSampling, Generated, default_shapes
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.memory_plan import plan_model

BUCKETS = [16, 32, 64, 128, 256, 384]
PROMPTS = [
    "Water leaves the river",
    "The headrace is a channel cut with a gentle fall, so the water",
    "At the wheel",
    "Requests arrive on topics, wait in buckets of similar length, and leave as",
    " ".join(["A sluice at the head of the channel lets the miller close it in a flood."] * 4),
    "the",
]
NEW_TOKENS = 32


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _ids(results: list[Generated]) -> list[list[int]]:
    return [r.token_ids for r in results]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def load(lm_dir: Path, device: str) -> GenerationBackend:
    backend = GenerationBackend(tiny_lm.NAME, lm_dir, tiny_lm.MAX_POSITIONS, device=device)
    backend.load_weights()
    backend.build()
    backend.warm_up(default_shapes(BUCKETS, rows=2))
    return backend


def correctness(backend: GenerationBackend, reference: GenerationBackend) -> dict[str, Any]:
    """Greedy rows batched (left-padded) against each prompt alone and against the fp32 CPU
    reference; seeded sampling run twice, and a seeded row batched against it alone."""
    items = backend.encode(PROMPTS, [False] * len(PROMPTS))
    greedy = [FixedSampling(max_tokens=NEW_TOKENS)] * len(items)
    batched = _ids(backend.generate(items, greedy))
    again = _ids(backend.generate(items, greedy))
    alone = [_ids(backend.generate([it], greedy[:1]))[0] for it in items]
    cpu = _ids(reference.generate(items, greedy))
    seeded = [
        FixedSampling(max_tokens=NEW_TOKENS, temperature=0.8, top_p=0.9, seed=7 + i)
        for i in range(len(items))
    ]
    sampled = _ids(backend.generate(items, seeded))
    resampled = _ids(backend.generate(items, seeded))
    first_alone = _ids(backend.generate(items[:1], seeded[:1]))[0]
    tokens = sum(len(r) for r in batched)
    return {
        "greedy_repeatable": batched == again,
        "greedy_rows_equal_alone": sum(b == a for b, a in zip(batched, alone, strict=True)),
        "rows": len(items),
        # fp16 against fp32 may part at a near tie; the share of tokens before rows part
        "greedy_prefix_share_vs_cpu_fp32": round(
            sum(_common_prefix(b, c) for b, c in zip(batched, cpu, strict=True)) / max(tokens, 1),
            3,
        ),
        "seeded_repeatable": sampled == resampled,
        "seeded_row_equals_alone": sampled[0] == first_alone,
    }


def decode_rate(backend: GenerationBackend, rows: int, prompt: int, new: int) -> dict[str, float]:
    """Generated tokens per second: ``rows`` prompts of ``prompt`` tokens, up to ``new``
    tokens each (a row that draws eos stops early; the tokens generated are counted)."""
    filler = int(backend.tokenizer(" the")["input_ids"][-1])
    items = [EncodedItem(ids=[filler] * prompt, token_count=prompt)] * rows
    params = [FixedSampling(max_tokens=new)] * rows
    backend.generate(items[:1], params[:1])
    _sync(backend.device)
    start = time.perf_counter()
    out = backend.generate(items, params)
    _sync(backend.device)
    seconds = time.perf_counter() - start
    generated = sum(r.completion_tokens for r in out)
    return {"generated_tokens": generated, "s": seconds, "tokens_per_s": generated / seconds}


def memory_plans(backend: GenerationBackend, lm_dir: Path, device: str) -> dict[str, Any]:
    """The planner's estimate beside its plan from the figures warm-up measured (on CUDA)."""
    knobs: dict[str, Any] = {"buckets": BUCKETS, "max_batch_tokens": 8192, "max_new_tokens": 128}
    _, estimated = plan_model(lm_dir, device, **knobs)
    _, measured = plan_model(lm_dir, device, memory=backend.timings.memory, **knobs)
    keys = ("weight_bytes", "overhead_bytes", "activation_bytes_per_token", "max_sequences")
    return {
        "memory_after_warm_up": backend.timings.memory,
        "estimated": {k: getattr(estimated, k) for k in keys},
        "measured": {k: getattr(measured, k) for k in keys} | {"used": measured.measured},
        "bucket_rows_measured": measured.bucket_rows,
    }


def check_generation(device: str, quick: bool = False) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="headrace-test-lm-") as scratch:
        lm_dir = tiny_lm.build(Path(scratch) / "lm")
        backend = load(lm_dir, device)
        reference = load(lm_dir, "cpu")
        t = backend.timings
        report: dict[str, Any] = {
            "model": f"{tiny_lm.NAME} (TEST MODEL: random weights)",
            "load": {
                "load_weights_s": t.load_weights_s,
                "build_s": t.build_s,
                "warm_up_s": t.warm_up_s,
            },
            "correctness": correctness(backend, reference),
        }
        shapes = [(1, 16, 16)] if quick else [(1, 32, 64), (16, 32, 64), (64, 128, 64)]
        report["decode"] = {
            f"{rows}x{prompt}+{new}": decode_rate(backend, rows, prompt, new)
            for rows, prompt, new in shapes
        }
        report["memory_plan"] = memory_plans(backend, lm_dir, device)
    c = report["correctness"]
    report["ok"] = bool(c["greedy_repeatable"] and c["seeded_repeatable"])
    return report
