"""``headrace demo``: the main job on the embedded local stack.

Brings up the stack (if it is not up), a dispatcher and a worker, embeds a few hundred
sentences of mixed lengths with a progress bar, prints a similarity example and the figures,
then stops what it started.
"""

from __future__ import annotations

import os
import time
import uuid

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import local_pipeline, local_workers
from headrace.ops.sample_texts import long_tail_texts
from headrace.producers.client import Client
from headrace.schemas.messages import EmbeddingResult, Reply

QUERY = "How do I get water to the turbine?"
CANDIDATES = [
    "A headrace channel carries water from the river to the turbine.",
    "The bakery sells fresh bread every morning.",
    "Engineers cut a canal so the mill wheel would turn.",
    "Stock prices fell sharply on Tuesday.",
]


def run_demo(
    settings: Settings, count: int, seed: int, console: Console, metrics: bool = True
) -> int:
    stack = LocalStack(settings)
    started_stack = not stack.is_up()
    if started_stack:
        console.print("starting the local stack (SeaweedFS, tansu, Redis)...")
        stack.up()
    prefix = f"demo-{uuid.uuid4().hex[:6]}"
    env = {"HEADRACE_TOPIC_PREFIX": prefix}
    os.environ.update(env)
    demo_settings = settings.model_copy(update={"topic_prefix": prefix})
    try:
        workers = local_workers(settings.device, settings.torch_threads)
        console.print(f"starting a dispatcher and {workers} worker(s) (model load + warm-up)...")
        with (
            local_pipeline(env, settings.device, settings.torch_threads, metrics) as pipeline,
            Client(demo_settings, tenant="demo") as client,
        ):
            if metrics:
                console.print(
                    f"metrics: {', '.join(pipeline.metrics_urls)} "
                    "(watch it live: `headrace top` in another terminal)"
                )
            texts = long_tail_texts(count, seed=seed)
            replies = _embed_with_progress(client, texts, console)
            _similarity(client, console)
            _figures(replies, console)
    finally:
        if started_stack:
            stack.down()
            console.print("local stack stopped")
    return 0


def _embed_with_progress(client: Client, texts: list[str], console: Console) -> list[Reply]:
    start = time.perf_counter()
    submissions = client.submit_many(texts)
    columns = (TextColumn("embedding"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console) as progress:
        task = progress.add_task("embed", total=len(submissions))
        done = 0
        while done < len(submissions):
            now_done = sum(s.future.done() for s in submissions)
            progress.update(task, completed=now_done)
            done = now_done
            time.sleep(0.05)
    replies = [s.result(1) for s in submissions]
    wall = time.perf_counter() - start
    tokens = sum(r.result.token_count for r in replies if isinstance(r.result, EmbeddingResult))
    console.print(
        f"{len(replies)} texts, {tokens:,} tokens in {wall:.1f}s "
        f"= {tokens / wall:,.0f} tokens/s end to end"
    )
    return replies


def _similarity(client: Client, console: Console) -> None:
    vectors = torch.tensor(client.embed([QUERY, *CANDIDATES]))
    scores = (vectors[1:] @ vectors[0]).tolist()
    table = Table("cosine", f"similarity to: {QUERY!r}")
    for score, text in sorted(zip(scores, CANDIDATES, strict=True), reverse=True):
        table.add_row(f"{score:.3f}", text)
    console.print(table)


def _figures(replies: list[Reply], console: Console) -> None:
    batches = {r.batch.batch_id: r.batch for r in replies if r.batch is not None}
    real = sum(b.real_tokens for b in batches.values())
    padded = sum(b.padded_tokens for b in batches.values())
    per_bucket: dict[int, int] = {}
    for info in batches.values():
        per_bucket[info.bucket] = per_bucket.get(info.bucket, 0) + 1
    timings = [r.timings for r in replies if r.timings is not None]
    table = Table("figure", "value")
    table.add_row("batches", str(len(batches)))
    table.add_row(
        "batches per bucket", ", ".join(f"{b}:{n}" for b, n in sorted(per_bucket.items()))
    )
    table.add_row("padding efficiency (real / padded tokens)", f"{real / padded:.3f}")
    table.add_row("mean batch size", f"{len(replies) / len(batches):.1f}")
    if timings:
        table.add_row(
            "median compute per batch", f"{_median([t.compute_ms for t in timings]):.0f} ms"
        )
        table.add_row(
            "median queued + batch wait",
            f"{_median([t.queued_ms + t.batch_wait_ms for t in timings]):.0f} ms",
        )
    console.print(table)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
