"""Pipeline benchmark: one command, every figure measured in the same run.

(a) raw model tokens/s: the model alone, in a tight loop, over the batches the pipeline formed
    in (b), timed right after it;
(a') and, where the pipeline runs one worker per core, as many loops at once (bench/raw.py)
(b) pipeline tokens/s end to end (submit -> last reply), length buckets as configured, each
    bucket's waiting requests packed into batches of similar length
    (``workers/dispatcher/packer.py``)
(b0) the same with batches in arrival order (no packing)
(c) the same with every request forced into one bucket
(d) padding efficiency (real / padded tokens) of (b), (b0) and (c)
(e) a lone request: latency minus its compute time, p50 / p99; and the same for a request
    after a quiet spell (consumers fetch less often once idle: runtime/fetch_wait.py)
(e0) the broker's floor under (e): one hop of the bare Kafka client with the pipeline's
    settings, for the request (as many topics as the dispatcher reads) and the reply
    (bench/broker_floor.py), each timed right after each lone request: the pipeline's own
    part is each request's latency less the two hops timed beside it (the machine's hour
    moves both alike)

Replies carry the vectors as float32 bytes (base64), as ``Client.embed`` and the gateway ask
(``--floats``: as JSON numbers, a request's default when it does not ask).

    python -m bench.pipeline [--count 600] [--lone 50] [--quiet 5] [--floats]
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.table import Table

from bench import cpu, raw
from bench.lone import LoneLegs, VectorEncoding, add_lone_rows, time_lone_requests
from bench.stats import pct
from headrace.config.settings import Settings
from headrace.models.tokenizer import token_counter
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import local_pipeline, local_workers
from headrace.ops.sample_texts import long_tail_texts
from headrace.producers.client import Client
from headrace.schemas.messages import EmbeddingResult, Reply
from headrace.schemas.topics import LANES

console = Console()


@dataclass
class RunResult:
    wall_s: float
    real_tokens: int
    batches: dict[str, list[int]]  # batch_id -> indices of texts
    batch_real: int
    batch_padded: int
    replies: list[Reply]
    compute_s: float  # sum of the batches' compute time on the worker
    cpu_s: dict[str, float]  # CPU seconds per process during the run

    @property
    def tokens_per_s(self) -> float:
        return self.real_tokens / self.wall_s

    @property
    def padding_efficiency(self) -> float:
        return self.batch_real / self.batch_padded


def _settings_env(prefix: str, buckets: list[int] | None, pack: bool = True) -> dict[str, str]:
    env = {"HEADRACE_TOPIC_PREFIX": prefix, "HEADRACE_PACK_BATCHES": str(pack).lower()}
    if buckets is not None:
        env["HEADRACE_BUCKETS"] = json.dumps(buckets)
    return env


@contextlib.contextmanager
def scraping(urls: list[str], every_s: float | None) -> Iterator[None]:
    """Scrape ``urls``' /metrics every ``every_s`` on a thread while the block runs."""
    stop = threading.Event()

    def scrape() -> None:
        while every_s is not None and not stop.wait(every_s):
            for url in urls:
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"{url}/metrics", timeout=5).read()

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def run_pipeline(
    texts: list[str],
    env: dict[str, str],
    services: dict[str, int],
    lone: int = 0,
    quiet: int = 0,
    scrape_every_s: float | None = None,
    vector_encoding: VectorEncoding = "base64",
    floor_topics: int | None = None,
) -> tuple[RunResult, LoneLegs]:
    """``scrape_every_s``: the processes serve /metrics and are scraped that often (as
    Prometheus would) while the run lasts. ``vector_encoding``: how the replies carry the
    vectors (``base64``: float32 bytes, as ``Client.embed`` asks; ``float``: JSON numbers).
    ``floor_topics``: time the broker's two hops after each lone request (the request's
    over that many topics)."""
    os.environ.update(env)
    settings = Settings()
    metrics = scrape_every_s is not None
    with (
        local_pipeline(env, settings.device, settings.torch_threads, metrics) as pipeline,
        Client(settings, tenant="bench") as client,
        scraping(pipeline.metrics_urls, scrape_every_s),
    ):
        client.embed(texts[:8])  # connections warm
        pids = {**services, "dispatcher": pipeline.dispatcher.pid, "client": os.getpid()}
        pids.update({w.name: w.pid for w in pipeline.workers})
        cpu_before = cpu.snapshot(pids)
        start = time.perf_counter()
        submissions = client.submit_many(texts, vector_encoding=vector_encoding)
        replies = [s.result(600) for s in submissions]
        wall = time.perf_counter() - start
        cpu_used = cpu.delta(cpu_before, cpu.snapshot(pids))
        legs = time_lone_requests(
            client, texts, settings, lone, quiet, vector_encoding, floor_topics
        )
    failed = [r for r in replies if r.error is not None]
    if failed:
        raise SystemExit(f"{len(failed)} requests failed, first: {failed[0].error}")
    batches: dict[str, list[int]] = {}
    sizes: dict[str, tuple[int, int]] = {}
    for index, reply in enumerate(replies):
        assert reply.batch is not None
        batches.setdefault(reply.batch.batch_id, []).append(index)
        sizes[reply.batch.batch_id] = (reply.batch.real_tokens, reply.batch.padded_tokens)
    real = sum(r.result.token_count for r in replies if isinstance(r.result, EmbeddingResult))
    compute_ms = {r.batch.batch_id: r.timings.compute_ms for r in replies if r.batch and r.timings}
    return (
        RunResult(
            wall_s=wall,
            real_tokens=real,
            batches=batches,
            batch_real=sum(r for r, _ in sizes.values()),
            batch_padded=sum(p for _, p in sizes.values()),
            replies=replies,
            compute_s=sum(compute_ms.values()) / 1000,
            cpu_s=cpu_used,
        ),
        legs,
    )


def counting_us(texts: list[str], model: str, poll: int = 32) -> float:
    """What the dispatcher's own token count costs, per request: the model's tokenizer over
    ``texts`` in polls of ``poll`` records (its first call loads the tokenizer: not timed)."""
    count = token_counter(Settings(model=model))
    count(texts[:1])
    start = time.perf_counter()
    for i in range(0, len(texts), poll):
        count(texts[i : i + poll])
    return (time.perf_counter() - start) / len(texts) * 1e6


def main(
    count: int = 600,
    lone: int = 50,
    quiet: int = 5,
    seed: int = 7,
    single: bool = True,
    unpacked: bool = True,
    floats: bool = typer.Option(
        False, help="replies carry vectors as JSON numbers, not float32 bytes (base64)"
    ),
) -> None:
    settings = Settings()
    encoding: VectorEncoding = "float" if floats else "base64"
    # the dispatcher reads every bucket's topic in both lanes, and the ingress topic
    request_topics = len(settings.buckets) * len(LANES) + 1
    stack = LocalStack(settings)
    started_stack = not stack.is_up()
    if started_stack:
        stack.up()
    try:
        texts = long_tail_texts(count, seed=seed)
        run_id = uuid.uuid4().hex[:6]
        console.print(
            f"{len(texts)} texts; buckets {settings.buckets}; "
            f"max_batch_tokens {settings.max_batch_tokens}, max_wait_ms {settings.max_wait_ms}; "
            f"vectors as {encoding}"
        )
        services = {s.name: s.pid for s in stack.status()}
        bucketed, legs = run_pipeline(
            texts,
            _settings_env(f"bench-{run_id}-b", None),
            services,
            lone,
            quiet,
            vector_encoding=encoding,
            floor_topics=request_topics,
        )
        # the raw loops right after (b), over the batches it formed, so that the machine's
        # hour moves both alike (they ran after (b0) and (c), minutes later, before)
        groups = [[texts[i] for i in idx] for idx in bucketed.batches.values()]
        raw_loop = raw.one_loop(groups, settings)
        workers = local_workers(settings.device, settings.torch_threads)
        raw_parallel = raw.parallel_loops(groups, settings, workers) if workers > 1 else None
        arrival = (
            run_pipeline(
                texts,
                _settings_env(f"bench-{run_id}-a", None, pack=False),
                services,
                lone,
                vector_encoding=encoding,
            )
            if unpacked
            else None
        )
        one_bucket = (
            run_pipeline(
                texts,
                _settings_env(f"bench-{run_id}-s", [settings.buckets[-1]]),
                services,
                vector_encoding=encoding,
            )[0]
            if single
            else None
        )
    finally:
        if started_stack:
            stack.down()

    table = Table("figure", "value")
    table.add_row("(a) raw model tokens/s, one tight loop", f"{raw_loop:,.0f}")
    if raw_parallel is not None:
        table.add_row(
            f"(a') raw, {workers} loops at once, 1 torch thread each",
            f"{raw_parallel.tokens_per_s:,.0f}",
        )
    table.add_row(
        "(b) pipeline tokens/s, length buckets",
        f"{bucketed.tokens_per_s:,.0f} ({workers} worker(s), "
        f"{'1 torch thread each' if workers > 1 else 'torch threads as configured'})",
    )
    table.add_row("    ratio (b)/(a)  [target >= 0.90]", f"{bucketed.tokens_per_s / raw_loop:.3f}")
    if raw_parallel is not None:
        table.add_row(
            "    ratio (b)/(a')", f"{bucketed.tokens_per_s / raw_parallel.tokens_per_s:.3f}"
        )
        split = cpu.Split.of(
            bucketed.cpu_s,
            bucketed.wall_s,
            bucketed.real_tokens,
            raw_parallel.tokens_per_s,
            raw_parallel.tokens_per_cpu_s,
        )
        table.add_row(
            "    useful tokens per CPU second: workers in (b) / loops in (a')",
            f"{split.workers_tokens_per_cpu_s:,.0f} / {split.loops_tokens_per_cpu_s:,.0f} = "
            f"{split.per_cpu:.3f}",
        )
        table.add_row(
            "    = cores the workers got in (b) / the loops in (a') x that",
            f"{split.workers_cores:.2f} / {split.loops_cores:.2f} = {split.share:.3f} "
            f"x {split.per_cpu:.3f} = {split.ratio:.3f}",
        )
        table.add_row(
            f"    cores busy during (b), of {split.cores}",
            ", ".join(f"{n} {c:.2f}" for n, c in sorted(split.during_b.items()))
            + f", idle {split.idle:.2f}",
        )
    table.add_row(
        "(d) padding efficiency, buckets  [target >= 0.95]", f"{bucketed.padding_efficiency:.3f}"
    )
    if arrival is not None:
        run, lone_legs = arrival
        table.add_row(
            "(b0) pipeline tokens/s, buckets, arrival order (no packing)",
            f"{run.tokens_per_s:,.0f}; (b)/(b0) {bucketed.tokens_per_s / run.tokens_per_s:.2f}",
        )
        table.add_row("    ratio (b0)/(a)", f"{run.tokens_per_s / raw_loop:.3f}")
        table.add_row("(d) padding efficiency, arrival order", f"{run.padding_efficiency:.3f}")
        table.add_row(
            "    batches (packed / arrival order)", f"{len(bucketed.batches)} / {len(run.batches)}"
        )
        if lone_legs.overhead_ms:
            table.add_row(
                "(e) lone latency - compute p50, arrival order",
                f"{pct(lone_legs.overhead_ms, 0.5):.1f} ms",
            )
    table.add_row(
        "    worker compute / wall, buckets", f"{bucketed.compute_s:.2f}s / {bucketed.wall_s:.2f}s"
    )
    dispatcher_cpu_s = bucketed.cpu_s.get("dispatcher", 0.0)
    us = counting_us(texts, settings.model)
    table.add_row(
        "    dispatcher counting tokens itself",
        f"{us:.0f} us/request, {us * len(texts) / 1e6 / max(dispatcher_cpu_s, 1e-9):.0%} "
        "of its CPU during (b)",
    )
    table.add_row(
        "    CPU seconds during (b)",
        ", ".join(f"{name} {sec:.2f}" for name, sec in sorted(bucketed.cpu_s.items())),
    )
    if one_bucket is not None:
        table.add_row("(c) pipeline tokens/s, one bucket", f"{one_bucket.tokens_per_s:,.0f}")
        table.add_row("    ratio (b)/(c)", f"{bucketed.tokens_per_s / one_bucket.tokens_per_s:.2f}")
        table.add_row("(d) padding efficiency, one bucket", f"{one_bucket.padding_efficiency:.3f}")
        table.add_row(
            "    batches (buckets / one bucket)",
            f"{len(bucketed.batches)} / {len(one_bucket.batches)}",
        )
    add_lone_rows(table, legs, request_topics)
    console.print(table)


if __name__ == "__main__":
    typer.run(main)
