"""Generation, static against continuous batching, every figure in one run.

One generation worker serving headrace-test-lm (the TEST MODEL: random weights; what is
measured is the batching, not the text), a stream of requests arriving at ``--rate`` per
second, 90% asking for 16 tokens and 10% for 256 (``--seed`` fixes which and the prompts):

- static: ``generation_slots=1``, the worker decodes one batch at a time to its end;
- continuous: ``generation_slots`` batches at once, their rows in one decode loop that rows
  join and leave at every step (``workers/backends/continuous.py``).

Reported per mode: output tokens/s (generated tokens / first submit to last reply), the
short requests' latency p50/p99, the long ones' p50, and the ratios.

The same stream also goes straight into the backend in one process (no broker, no Celery,
no other process on the cores), at ``--engine-rate``: what the batching itself gives, and
the output tokens per CPU second the process used (what a token costs, whatever else ran
on the machine at the time).

Structured output (``--structured``, on by default; ``--only-structured`` runs it alone): the
backend alone decodes ``--structured-rows`` rows of the same prompt at temperature 1, as
free text and then under a JSON Schema (a nested object with enums and bounded numbers),
and reports the milliseconds per generated token of each and what computing and applying
the grammar's masks (``workers/backends/grammar.py``) cost per generated token.

Both modes, in the worker and alone, run with ``--torch-threads`` (1: the README's advice
for CPU hosts; on this 2-core machine, shared with the broker, dispatcher and client, a
second intra-op thread made static 18% slower and continuous slower still: a step waits for
its slowest thread).

    python -m bench.generation [--requests 1200] [--rate 200] [--engine-rate 400] [--slots 64]
"""

from __future__ import annotations

import os
import queue
import random
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch
import typer
from rich.console import Console
from rich.table import Table

from bench import cpu
from bench.stats import pct
from headrace.config.settings import Settings
from headrace.models import tiny_lm
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from headrace.producers.submission import Submission
from headrace.schemas.messages import GenerationResult, Reply
from headrace.schemas.params import GenerateParams
from headrace.workers.backends.generation import GenerationBackend

console = Console(width=120)
SHORT, LONG = 16, 256
WORDS = tiny_lm.CORPUS.split()


@dataclass
class Run:
    mode: str
    wall_s: float
    output_tokens: int
    short_ms: list[float]
    long_ms: list[float]
    errors: int
    cpu_s: dict[str, float]  # CPU seconds per process while it ran
    legs: dict[str, list[float]]  # the short requests' timings as their replies say, ms
    process_cpu_s: float = 0.0  # the engine alone: CPU seconds of its process

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s


def workload(count: int, seed: int) -> list[tuple[str, int]]:
    """(prompt, max_tokens): prompts of 4-40 words; one request in ten asks for LONG."""
    rng = random.Random(seed)
    return [
        (" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 40))), LONG)
        if rng.random() < 0.1
        else (" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 40))), SHORT)
        for _ in range(count)
    ]


def measure(
    mode: str,
    slots: int,
    requests: list[tuple[str, int]],
    rate: float,
    services: dict[str, int],
    torch_threads: int = 1,
) -> Run:
    prefix = f"bench-gen-{mode}-{uuid.uuid4().hex[:6]}"
    env = {
        "HEADRACE_TOPIC_PREFIX": prefix,
        "HEADRACE_MODEL": tiny_lm.NAME,
        "HEADRACE_GENERATION_SLOTS": str(slots),
        "HEADRACE_TORCH_THREADS": str(torch_threads),
    }
    settings = Settings(topic_prefix=prefix, model=tiny_lm.NAME)
    with (
        Pipeline(env=env, worker_buckets=["all"]) as pipeline,
        Client(settings, tenant="bench") as client,
    ):
        client.generate("warm the connections", max_tokens=2)
        pids = {**services, "dispatcher": pipeline.dispatcher.pid, "client": os.getpid()}
        pids.update({w.name: w.pid for w in pipeline.workers})
        cpu_before = cpu.snapshot(pids)
        sent: list[tuple[float, int, Submission]] = []
        arrived: dict[int, float] = {}
        began = next_at = time.perf_counter()
        for i, (prompt, max_tokens) in enumerate(requests):  # open loop: nobody waits
            submission = client.submit_generation(prompt, max_tokens=max_tokens)
            sent.append((time.perf_counter(), max_tokens, submission))
            submission.future.add_done_callback(_stamp(arrived, i))
            next_at += 1.0 / rate
            time.sleep(max(0.0, next_at - time.perf_counter()))
        short_ms: list[float] = []
        long_ms: list[float] = []
        tokens = errors = 0
        legs: dict[str, list[float]] = {"queued": [], "batch_wait": [], "compute": []}
        for i, (at, max_tokens, submission) in enumerate(sent):
            reply = submission.result(600)
            if reply.error is not None or not isinstance(reply.result, GenerationResult):
                errors += 1
                continue
            tokens += reply.result.usage.completion_tokens
            if max_tokens == SHORT and reply.timings is not None:
                legs["queued"].append(reply.timings.queued_ms)
                legs["batch_wait"].append(reply.timings.batch_wait_ms)
                legs["compute"].append(reply.timings.compute_ms)
            (short_ms if max_tokens == SHORT else long_ms).append((arrived[i] - at) * 1000)
        used = cpu.delta(cpu_before, cpu.snapshot(pids))
    wall = max(arrived.values()) - began
    return Run(mode, wall, tokens, short_ms, long_ms, errors, used, legs)


def _stamp(arrived: dict[int, float], i: int) -> Callable[[Future[Reply]], None]:
    def done(_: Future[Reply]) -> None:
        arrived[i] = time.perf_counter()

    return done


def engine_alone(
    mode: str, requests: list[tuple[str, int]], rate: float, rows: int, torch_threads: int
) -> Run:
    """The same stream straight into the backend in this process (no broker, no Celery),
    with the worker's torch threads: static takes everything waiting as one batch whenever
    the last one ends (what the worker did); continuous hands each arrival to the decode loop
    from a thread of its own."""
    continuous = mode == "continuous"
    torch.set_num_threads(torch_threads)
    backend = GenerationBackend(
        tiny_lm.NAME,
        tiny_lm.ensure(tiny_lm.cache_dir()),
        tiny_lm.MAX_POSITIONS,
        device="cpu",
        continuous_rows=rows if continuous else None,
    )
    backend.load_weights()
    backend.build()
    items = backend.encode([p for p, _ in requests], [False] * len(requests))
    params = [GenerateParams(max_tokens=m) for _, m in requests]
    arrivals: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    sent: dict[int, float] = {}
    arrived: dict[int, float] = {}
    tokens = [0]

    def finish(batch: list[int]) -> None:
        outs = backend.generate([items[i] for i in batch], [params[i] for i in batch])
        now = time.perf_counter()
        for i, out in zip(batch, outs, strict=True):
            arrived[i] = now
            tokens[0] += out.completion_tokens

    def stream() -> None:
        next_at = time.perf_counter()
        for i in range(len(requests)):
            sent[i] = time.perf_counter()
            arrivals.put(i)
            next_at += 1.0 / rate
            time.sleep(max(0.0, next_at - time.perf_counter()))
        arrivals.put(None)

    cpu_before = time.process_time()
    began = time.perf_counter()
    threading.Thread(target=stream, daemon=True).start()
    callers: list[threading.Thread] = []
    ended = False
    while not ended:
        got = [arrivals.get()]
        while not arrivals.empty():
            got.append(arrivals.get())
        ended = None in got
        batch = [i for i in got if i is not None]
        if not batch:
            continue
        if continuous:
            callers.append(threading.Thread(target=finish, args=(batch,)))
            callers[-1].start()
        else:
            finish(batch)
    for caller in callers:
        caller.join()
    cpu = time.process_time() - cpu_before
    backend.close()
    short_ms = [(arrived[i] - sent[i]) * 1000 for i, (_, m) in enumerate(requests) if m == SHORT]
    long_ms = [(arrived[i] - sent[i]) * 1000 for i, (_, m) in enumerate(requests) if m == LONG]
    wall = max(arrived.values()) - began
    return Run(mode, wall, tokens[0], short_ms, long_ms, 0, {}, {}, cpu)


MILL_SCHEMA = {
    "type": "object",
    "properties": {
        "wheel": {"enum": ["overshot", "undershot", "breastshot"]},
        "stones": {"type": "integer", "minimum": 1, "maximum": 4},
        "parts": {"type": "array", "items": {"enum": ["shaft", "paddle", "sluice"]}, "maxItems": 3},
        "fall_m": {"type": "number", "minimum": 0, "maximum": 30},
    },
    "required": ["wheel", "stones", "parts", "fall_m"],
    "additionalProperties": False,
}


def structured_cost(rows: int, torch_threads: int) -> None:
    """Free text against JSON Schema on the backend alone (static, CPU): ms per generated
    token of each, and the masks' share (timed around ``Constraints.mask``)."""
    from headrace.schemas.response_format import ResponseFormat

    torch.set_num_threads(torch_threads)
    backend = GenerationBackend(
        tiny_lm.NAME, tiny_lm.ensure(tiny_lm.cache_dir()), tiny_lm.MAX_POSITIONS, device="cpu"
    )
    backend.load_weights()
    backend.build()
    constraints = backend._constraints
    masking = [0.0]
    plain_mask = constraints.mask

    def timed_mask(logits: torch.Tensor, matchers: Any) -> torch.Tensor:
        began = time.perf_counter()
        try:
            return plain_mask(logits, matchers)
        finally:
            masking[0] += time.perf_counter() - began

    constraints.mask = timed_mask  # type: ignore[method-assign]
    items = backend.encode(["The mill answers in JSON:"] * rows, [False] * rows)
    schema = ResponseFormat.for_schema(MILL_SCHEMA)
    legs = {
        "free text": [GenerateParams(max_tokens=48, temperature=1.0, seed=i) for i in range(rows)],
        "JSON Schema": [
            GenerateParams(max_tokens=96, temperature=1.0, seed=i, response_format=schema)
            for i in range(rows)
        ],
    }
    table = Table(
        "rows",
        "tokens",
        "ms per token",
        "masks ms per token",
        "finished stop",
        title=f"structured output, the backend alone, {rows} rows, CPU",
    )
    for name, params in legs.items():
        backend.generate(items[:2], params[:2])  # warm: the tokenizer's wrap, first shapes
        masking[0] = 0.0
        began = time.perf_counter()
        out = backend.generate(items, params)
        wall = time.perf_counter() - began
        tokens = sum(o.completion_tokens for o in out)
        stops = sum(o.finish_reason == "stop" for o in out)
        table.add_row(
            name,
            f"{tokens}",
            f"{wall * 1000 / tokens:.3f}",
            f"{masking[0] * 1000 / tokens:.3f}",
            f"{stops}/{rows}",
        )
    console.print(table)
    backend.close()


def report(title: str, runs: list[Run]) -> None:
    table = Table(
        "batching",
        "requests/s",
        "output tokens/s",
        "short p50 ms",
        "short p99 ms",
        "long p50 ms",
        "errors",
        title=title,
    )
    for run in runs:
        table.add_row(
            run.mode,
            f"{(len(run.short_ms) + len(run.long_ms)) / run.wall_s:.1f}",
            f"{run.tokens_per_s:,.0f}",
            f"{pct(run.short_ms, 0.5):.0f}",
            f"{pct(run.short_ms, 0.99):.0f}",
            f"{pct(run.long_ms, 0.5):.0f}",
            str(run.errors),
        )
    console.print(table)
    for run in runs:
        if run.cpu_s:
            console.print(
                f"  {run.mode}: CPU s/s "
                + ", ".join(f"{k} {v / run.wall_s:.2f}" for k, v in sorted(run.cpu_s.items()))
                + "; short requests' legs p50/p99 ms: "
                + ", ".join(
                    f"{k} {pct(v, 0.5):.0f}/{pct(v, 0.99):.0f}" for k, v in run.legs.items()
                )
            )
    if all(run.process_cpu_s for run in runs):
        console.print(
            "  output tokens per CPU second (the process, all its threads): "
            + ", ".join(f"{r.mode} {r.output_tokens / r.process_cpu_s:,.0f}" for r in runs)
        )
    static, continuous = runs
    speedup = continuous.tokens_per_s / static.tokens_per_s
    p99_ratio = pct(static.short_ms, 0.99) / pct(continuous.short_ms, 0.99)
    console.print(
        f"  continuous / static: output tokens/s {speedup:.2f}x, short p99 {p99_ratio:.2f}x lower"
    )


def main(
    requests: int = 1200,
    rate: float = 200.0,
    engine_rate: float = 400.0,
    slots: int = 64,
    rows: int = 256,
    seed: int = 19,
    torch_threads: int = 1,
    structured: bool = True,
    only_structured: bool = False,
    structured_rows: int = 64,
) -> None:
    if structured or only_structured:
        structured_cost(structured_rows, torch_threads)
    if only_structured:
        return
    settings = Settings()
    stack = LocalStack(settings)
    started = not stack.is_up()
    if started:
        stack.up()
    work = workload(requests, seed)
    services = {s.name: s.pid for s in stack.status()}
    try:
        pipeline = [
            measure("static", 1, work, rate, services, torch_threads),
            measure("continuous", slots, work, rate, services, torch_threads),
        ]
    finally:
        if started:
            stack.down()
    engine = [
        engine_alone(mode, work, engine_rate, rows, torch_threads)
        for mode in ("static", "continuous")
    ]
    console.print(
        f"{requests} requests, {sum(1 for _, m in work if m == LONG)} of them max_tokens {LONG}, "
        f"the rest {SHORT}; headrace-test-lm (TEST MODEL), CPU"
    )
    report(f"the pipeline, one worker, {rate:g} requests/s", pipeline)
    report(f"the engine alone, in one process, {engine_rate:g} requests/s", engine)


if __name__ == "__main__":
    typer.run(main)
