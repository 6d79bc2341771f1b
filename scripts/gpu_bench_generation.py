"""The generation part of scripts/gpu_bench.py (imported by it once ``headrace`` is mapped,
before it imports this): static against continuous batching through ``GenerationBackend``
on the test LM and on a random-weight GPT-2 shaped like gpt2-medium, beside transformers'
own continuous batching; host copies per decode step; a profile of the loop on request."""

from __future__ import annotations

import json
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from gpu_bench_embeddings import WORDS, sync

from headrace.models import tiny_lm
from headrace.workers.backends.base import EncodedItem, FixedSampling, default_shapes
from headrace.workers.backends.generation import GenerationBackend


def gpt2_medium_shaped(directory: Path, quick: bool) -> Path:
    """A random-weight GPT-2 shaped like gpt2-medium (a TEST MODEL), with the test LM's
    tokenizer; ``quick``: a small one of the same kind."""
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    lm_dir = tiny_lm.build(directory / "tokenizer-source")
    tokenizer = AutoTokenizer.from_pretrained(str(lm_dir))
    size = {"n_embd": 64, "n_layer": 2, "n_head": 4} if quick else {}
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=1024,
        n_embd=size.get("n_embd", 1024),
        n_layer=size.get("n_layer", 24),
        n_head=size.get("n_head", 16),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    out = directory / "gpt2-medium-shaped"
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def workload(
    backend: GenerationBackend, count: int, long_tokens: int
) -> tuple[list[EncodedItem], list[FixedSampling]]:
    rng = random.Random(11)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 40))) for _ in range(count)]
    items = backend.encode(texts, [True] * count)
    params = [
        FixedSampling(
            max_tokens=long_tokens if k % 10 == 0 else 16,
            temperature=0.0 if k % 2 else 0.8,
            top_p=0.95,
            seed=k,
        )
        for k in range(count)
    ]
    return items, params


@contextmanager
def host_copies() -> Iterator[Counter[str]]:
    """Counts ``tolist``/``item`` calls on every thread while open."""
    calls: Counter[str] = Counter()
    saved = {name: getattr(torch.Tensor, name) for name in ("tolist", "item")}
    for name, method in saved.items():

        def counted(self: torch.Tensor, *a: Any, _m: Any = method, _n: str = name) -> Any:
            calls[_n] += 1
            return _m(self, *a)

        setattr(torch.Tensor, name, counted)
    try:
        yield calls
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)


def _load(
    name: str, model_dir: Path, device: torch.device, rows: int | None, slots: bool | None = None
) -> GenerationBackend:
    """``slots``: the continuous decoder's rows on fixed slots (None: the device's default,
    slots with CUDA graphs on a GPU, the left-padded cache on a CPU)."""
    context = json.loads((model_dir / "config.json").read_text())["n_positions"]
    backend = GenerationBackend(
        name, model_dir, context, device=str(device), continuous_rows=rows, slots=slots
    )
    backend.load_weights()
    backend.build()
    backend.warm_up(default_shapes([16, 64], rows=2))
    return backend


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


def run_static(
    backend: GenerationBackend, items: list[EncodedItem], params: list[FixedSampling], rows: int
) -> dict[str, Any]:
    """One worker, one batch at a time, batches of ``rows`` in arrival order."""
    device = backend.device
    short_done: list[float] = []
    tokens = 0
    sync(device)
    start = time.perf_counter()
    with host_copies() as copies:
        for k in range(0, len(items), rows):
            out = backend.generate(items[k : k + rows], params[k : k + rows])
            now = time.perf_counter() - start
            tokens += sum(o.completion_tokens for o in out)
            short_done += [now for p in params[k : k + rows] if p.max_tokens == 16]
    elapsed = time.perf_counter() - start
    return {
        "output_tok_s": round(tokens / elapsed),
        "seconds": round(elapsed, 2),
        "short_p99_s": round(_p99(short_done), 3),
        "host_copies": dict(copies),
    }


def run_continuous(
    backend: GenerationBackend,
    items: list[EncodedItem],
    params: list[FixedSampling],
    rows: int,
    slots: int = 64,
) -> dict[str, Any]:
    """``slots`` callers (a worker's batch threads) hand in batches of ``rows`` from one
    queue; rows finish into ``on_finished`` (their latency)."""
    assert backend.decoder is not None
    decoder = backend.decoder
    device = backend.device
    batches = [(k, k + rows) for k in range(0, len(items), rows)]
    lock = threading.Lock()
    short_done: list[float] = []
    tokens = [0]
    start = time.perf_counter()

    def caller() -> None:
        while True:
            with lock:
                if not batches:
                    return
                a, b = batches.pop(0)

            def finished(done: list[tuple[int, Any]], a: int = a) -> None:
                now = time.perf_counter() - start
                with lock:
                    for row, out in done:
                        tokens[0] += out.completion_tokens
                        if params[a + row].max_tokens == 16:
                            short_done.append(now)

            backend.generate(items[a:b], params[a:b], None, None, finished)

    steps = decoder.steps
    sync(device)
    start = time.perf_counter()
    with host_copies() as copies:
        threads = [threading.Thread(target=caller) for _ in range(slots)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    elapsed = time.perf_counter() - start
    decode_steps = decoder.steps - steps
    graphs = backend.graphs
    return {
        "layout": "slots" if backend.slot_batch is not None else "left-padded",
        "cuda_graphs": {"captured": graphs.captured, "failed": graphs.failed} if graphs else None,
        "output_tok_s": round(tokens[0] / elapsed),
        "seconds": round(elapsed, 2),
        "short_p99_s": round(_p99(short_done), 3),
        "decode_steps": decode_steps,
        # the wall over the decode steps (the prefills between them included)
        "ms_a_step": round(elapsed * 1000 / max(1, decode_steps), 2),
        "most_rows": decoder.most_rows,
        "host_copies_per_step": round(copies["tolist"] / max(1, decode_steps), 3),
        "item_calls": copies["item"],
    }


def run_saturated(
    backend: GenerationBackend,
    items: list[EncodedItem],
    params: list[FixedSampling],
    warm_s: float,
    window_s: float,
) -> dict[str, Any]:
    """The loop's rate while requests keep coming faster than it serves them: twice as
    many callers as the loop has places each hand in one request at a time, taken in turn
    from the workload (over and over), until the window ends; output tokens are counted by
    the loop over the window that starts ``warm_s`` in (the loop full by then), and the rows
    waiting to join are sampled through it (``saturated``: never none). (Callers of batches
    would not do: a batch's caller waits for its longest row, so 64 callers of 16 rows of
    this mix keep only ~100 rows decoding.) A fixed set of requests all submitted at once
    (``run_continuous``) ends with a tail of long rows decoding alone, 256 steps of it for
    this mix, which bounds its tokens/s whatever a step costs; this figure has no tail."""
    assert backend.decoder is not None
    decoder = backend.decoder
    turn = [0]
    lock = threading.Lock()
    start = time.perf_counter()
    feed_until = start + warm_s + window_s

    def caller() -> None:
        while time.perf_counter() < feed_until:
            with lock:
                k = turn[0] % len(items)
                turn[0] += 1
            backend.generate(items[k : k + 1], params[k : k + 1])

    threads = [threading.Thread(target=caller) for _ in range(2 * decoder.max_rows)]
    for thread in threads:
        thread.start()
    time.sleep(warm_s)
    began, tokens, steps = time.perf_counter(), decoder.tokens, decoder.steps
    fewest_waiting = decoder.waiting
    while time.perf_counter() < feed_until:
        time.sleep(0.02)
        fewest_waiting = min(fewest_waiting, decoder.waiting)
    ended = time.perf_counter()
    tokens, steps = decoder.tokens - tokens, decoder.steps - steps
    for thread in threads:  # the rows handed in finish (not counted)
        thread.join()
    return {
        "output_tok_s": round(tokens / (ended - began)),
        "window_s": round(ended - began, 2),
        "tokens": tokens,
        "decode_steps": steps,
        "ms_a_step": round((ended - began) * 1000 / max(1, steps), 2),
        "saturated": fewest_waiting > 0,
        "fewest_waiting": fewest_waiting,
        "most_rows": decoder.most_rows,
        "seconds_with_drain": round(time.perf_counter() - start, 2),
    }


def transformers_continuous(
    model_dir: Path, device: torch.device, items: list[EncodedItem], params: list[FixedSampling]
) -> dict[str, Any]:
    """transformers' own continuous batching on the same requests, greedy: the short ones and
    the long ones as two calls (it takes one max_new_tokens per call)."""
    try:
        from transformers import AutoModelForCausalLM, GenerationConfig

        dtype = torch.float16 if device.type == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(
            str(model_dir), attn_implementation="paged|sdpa", dtype=dtype
        ).to(device)
        model.eval()
        tokens = 0
        sync(device)
        start = time.perf_counter()
        for longest in sorted({p.max_tokens for p in params}):
            inputs = [i.ids for i, p in zip(items, params, strict=True) if p.max_tokens == longest]
            config = GenerationConfig(
                max_new_tokens=longest,
                do_sample=False,
                eos_token_id=model.config.eos_token_id,
                pad_token_id=model.config.pad_token_id,
            )
            # (not under inference_mode: its manager resets tensors it made outside it)
            out = model.generate_batch(inputs=inputs, generation_config=config)
            tokens += sum(len(o.generated_tokens) for o in out.values())
        sync(device)
        elapsed = time.perf_counter() - start
        return {"output_tok_s": round(tokens / elapsed), "seconds": round(elapsed, 2)}
    except Exception as exc:  # a bench row: say why it has no figure, go on with the rest
        return {"failed": f"{type(exc).__name__}: {exc}"[:500]}


def bench_generation(
    label: str,
    model_dir: Path,
    device: torch.device,
    count: int,
    long_tokens: int,
    quick: bool,
    window_s: float,
) -> dict[str, Any]:
    static = _load(label, model_dir, device, None)
    items, params = workload(static, count, long_tokens)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    report: dict[str, Any] = {"requests": count}
    report["static"] = run_static(static, items, params, rows=64)
    del static
    # the device's default layout, then the other one (slots with CUDA graphs on a GPU,
    # the left-padded cache on a CPU): the same requests through both
    for key, slots in (("continuous", None), ("continuous_other_layout", device.type != "cuda")):
        continuous = _load(label, model_dir, device, 256, slots)
        try:
            report[key] = run_continuous(continuous, items, params, rows=16)
            if key == "continuous":  # the device's layout at a saturating rate
                report["continuous_saturated"] = run_saturated(
                    continuous, items, params, warm_s=window_s / 4, window_s=window_s
                )
        finally:
            continuous.close()
    static_rate = max(1, report["static"]["output_tok_s"])
    report["continuous_over_static"] = round(report["continuous"]["output_tok_s"] / static_rate, 2)
    report["saturated_over_static"] = round(
        report["continuous_saturated"]["output_tok_s"] / static_rate, 2
    )
    if quick:  # on CPU it takes longer than the rest together: its GPU run is the figure
        report["transformers_continuous"] = {"skipped": "--quick"}
    else:
        report["transformers_continuous"] = transformers_continuous(
            model_dir, device, items, params
        )
    hf = report["transformers_continuous"].get("output_tok_s")
    if hf:
        report["continuous_over_transformers"] = round(report["continuous"]["output_tok_s"] / hf, 2)
    return report


def profile_decode(model_dir: Path, device: torch.device, rows: int) -> dict[str, Any]:
    """Where a decode step's time goes: ``rows`` rows decoded 48 tokens together (static, on
    this thread: the profiler sees the model's own operators), top operators by their own
    CPU time, wall per step, and the device's peak memory beside the plan's estimate from
    warm-up."""
    from torch.profiler import ProfilerActivity, profile

    backend = _load("profiled", model_dir, device, None)
    items, _ = workload(backend, rows, 48)
    params = [FixedSampling(max_tokens=48, temperature=0.8, seed=k) for k in range(rows)]
    backend.generate(items[:8], params[:8])  # warm
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.reset_peak_memory_stats(device)
    sync(device)
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        out = backend.generate(items, params)
        sync(device)
    elapsed = time.perf_counter() - start
    steps = max(o.completion_tokens for o in out)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20)
    report: dict[str, Any] = {
        "rows": rows,
        "steps": steps,
        "ms_per_step_under_profiler": round(elapsed / max(1, steps) * 1000, 2),
        "top_self_cpu": table.splitlines(),
    }
    if device.type == "cuda":
        report["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 2)
        report["memory_plan_estimate"] = str(backend.timings.memory)
    return report


def generation(
    device: torch.device,
    quick: bool,
    profiled: bool,
    report: dict[str, Any],
    save: Callable[[], None],
) -> dict[str, Any]:
    """Each model's figures into ``report`` as they are measured (``save`` after each)."""
    with tempfile.TemporaryDirectory(prefix="headrace-gpu-bench-") as scratch:
        lm_dir = tiny_lm.build(Path(scratch) / "test-lm")
        medium = gpt2_medium_shaped(Path(scratch), quick)
        count = 60 if quick else 600
        long_tokens = 32 if quick else 256
        window_s = 1.0 if quick else 4.0
        if profiled:
            report["profile"] = profile_decode(medium, device, 256 if not quick else 16)
            save()
        for key, label, model_dir in (
            ("test_lm", "headrace-test-lm", lm_dir),
            ("gpt2_medium_shaped", "gpt2-medium-shaped (random weights)", medium),
        ):
            report[key] = bench_generation(
                label, model_dir, device, count, long_tokens, quick, window_s
            )
            save()
        return report
