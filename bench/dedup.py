"""Duplicate-heavy traffic through the local pipeline, every figure from one run:

A trace of ``--requests`` requests drawn by Zipf's law (``--zipf`` s = 1.1) over ``--distinct``
texts, sent in bursts of ``--burst`` at once (each burst once the one before is answered),
each text tagged ``doc:<its index>``. The same trace three times:

(a) cache off: every request is computed;
(b) the exact cache, without in-flight coalescing (``HEADRACE_CACHE_COALESCE=false``): what
    the client finds cached is not sent, but identical requests in flight are each computed;
(c) the exact cache with coalescing: forward passes per unique input [target 1.00].

For each: rows computed (replies a worker computed) per unique input, requests/s, latency
p50/p99, and (c)'s throughput and p99 against (a)'s. Then (d): for ``--events`` texts of (c)'s
run, an event on an upstream topic (``headrace invalidator`` maps it to the text's tag), from
the broker's acknowledgement of the event to the entry gone from L2 and from this client's
L1: p50/p99 [target p99 <= 100 ms].

    python -m bench.dedup [--requests 20000] [--distinct 2000] [--burst 500] [--events 100]
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import typer
from rich.console import Console
from rich.table import Table

from bench.stats import pct
from headrace.cache.requests import request_key
from headrace.config.settings import Settings
from headrace.config.tag_rules import TagRule
from headrace.health.ready import is_ready_line
from headrace.models.registry import serving_version
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import local_pipeline
from headrace.ops.sample_texts import long_tail_texts
from headrace.producers.client import Client
from headrace.schemas.messages import Reply
from headrace.transport.kafka import clients as kafka_clients

console = Console(width=120)
TENANT = "bench"
TARGET_EVICTION_P99_MS = 100.0


@dataclass
class Run:
    name: str
    requests: int
    unique: int  # distinct texts in the trace
    computed: int  # replies a worker computed (the rest: from the cache, or coalesced)
    seconds: float
    latencies_ms: list[float]
    evictions_ms: list[float] = field(default_factory=list)  # (d), after run (c)

    @property
    def passes_per_unique(self) -> float:
        return self.computed / self.unique

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds


def zipf_trace(requests: int, distinct: int, s: float, seed: int = 11) -> list[int]:
    """``requests`` draws of a text's index, rank k with probability proportional to k^-s."""
    weights = [1.0 / (k**s) for k in range(1, distinct + 1)]
    return random.Random(seed).choices(range(distinct), weights=weights, k=requests)


def send_trace(client: Client, texts: list[str], trace: list[int], burst: int) -> Run:
    """Each burst's requests at once (prepared one by one: a tag each), then its replies."""
    latencies: list[float] = []
    computed = 0
    lock = threading.Lock()
    start = time.perf_counter()
    for at in range(0, len(trace), burst):
        done = threading.Semaphore(0)
        futures: list[Future[Reply]] = []
        for index in trace[at : at + burst]:
            ((request, bucket),) = client.prepare(
                [texts[index]], tags=[f"doc:{index}"], cache_class="tagged"
            )
            sent_at = time.perf_counter()
            future = client.send(request, bucket).future
            future.add_done_callback(_arrived(sent_at, latencies, lock, done))
            futures.append(future)
        client.flush()
        for _ in futures:
            done.acquire()
        for future in futures:
            reply = future.result()
            assert reply.result is not None, reply.error
            computed += reply.batch is not None
    seconds = time.perf_counter() - start
    return Run("", len(trace), len(set(trace)), computed, seconds, latencies)


def _arrived(
    sent_at: float, latencies: list[float], lock: threading.Lock, done: threading.Semaphore
) -> Callable[[Future[Reply]], None]:
    def stamp(_: Future[Reply]) -> None:
        with lock:
            latencies.append((time.perf_counter() - sent_at) * 1000)
        done.release()

    return stamp


def one_run(
    name: str, env: dict[str, str], cache: bool, texts: list[str], trace: list[int], burst: int
) -> Run:
    """The trace through a fresh pipeline (``env``: its own topics and cache namespace; this
    process's environment is left as it was: the suite runs this bench in its own process)."""
    settings = Settings(topic_prefix=env["HEADRACE_TOPIC_PREFIX"], cache_enabled=cache)
    with (
        local_pipeline(env, settings.device, settings.torch_threads),
        Client(settings, tenant=TENANT) as client,
    ):
        client.embed(["warm the connections"])
        run = send_trace(client, texts, trace, burst)
        run.name = name
        if cache and EVENTS in env:
            run.evictions_ms = eviction_ms(client, settings, env, texts, sorted(set(trace)))
    return run


EVENTS = "BENCH_DEDUP_EVENTS"  # in a run's env: (d)'s event count


def eviction_ms(
    client: Client, settings: Settings, env: dict[str, str], texts: list[str], seen: list[int]
) -> list[float]:
    """For the first ``env[EVENTS]`` texts of ``seen``: the entry in this client's L1, an
    upstream event for its tag (through ``headrace invalidator``), then the time from the
    event on its topic (the broker acknowledged it) until the entry is gone from L1
    (evicted last) and L2."""
    assert client.cache is not None and client.cache.l1 is not None
    cache, l1 = client.cache, client.cache.l1
    upstream = upstream_topic(settings.topic_prefix)
    invalidator = subprocess.Popen(
        [sys.executable, "-m", "headrace.ops.cli", "invalidator", "--log-level", "WARNING"],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
    )
    producer = kafka_clients.producer(settings)
    out: list[float] = []
    produced: list[float] = []
    try:
        assert invalidator.stdout is not None
        assert is_ready_line(invalidator.stdout.readline()), "invalidator did not start"
        for index in seen[: int(env[EVENTS])]:
            ((request, _),) = client.prepare([texts[index]], tags=[f"doc:{index}"])
            key = request_key(request, serving_version(settings, request))
            cache.get(key)  # into L1, if only L2 had it
            hit = cache.get(key)
            assert hit is not None and hit.tier == "l1", f"text {index} is not cached"
            sent = time.perf_counter()
            producer.send(upstream, json.dumps({"id": index}).encode())
            producer.flush()
            start = time.perf_counter()  # the event is on its topic
            produced.append((start - sent) * 1000)
            while True:
                with cache._lock:
                    if l1.get(key) is None:
                        break
                time.sleep(0.0005)
            out.append((time.perf_counter() - start) * 1000)
            assert cache.l2.get(key) is None
    finally:
        producer.close()
        invalidator.terminate()
        invalidator.wait(10)
    console.print(
        f"  producing each event (to the broker's acknowledgement, not counted below): p50 "
        f"{pct(produced, 0.5):.1f} ms, p99 {pct(produced, 0.99):.1f} ms"
    )
    return out


def upstream_topic(prefix: str) -> str:
    return f"{prefix}.docs.changes"


def main(
    requests: int = 20_000,
    distinct: int = 2_000,
    zipf: float = 1.1,
    burst: int = 500,
    events: int = 100,
    without_coalescing: bool = True,
    cache_off: bool = True,
) -> list[Run]:
    prefix = f"bench-dedup-{uuid.uuid4().hex[:6]}"
    with LocalStack(Settings(topic_prefix=prefix)).while_needed():
        runs = run_plans(
            prefix, requests, distinct, zipf, burst, events, without_coalescing, cache_off
        )
    report(runs)
    return runs


def run_plans(
    prefix: str,
    requests: int,
    distinct: int,
    zipf: float,
    burst: int,
    events: int,
    without_coalescing: bool,
    cache_off: bool,
) -> list[Run]:
    texts = [f"{t[:240]} ({i})" for i, t in enumerate(long_tail_texts(distinct, seed=3))]
    trace = zipf_trace(requests, distinct, zipf)
    console.print(
        f"{requests} requests over {len(set(trace))} distinct texts (Zipf s={zipf}); the top "
        f"text {Counter(trace).most_common(1)[0][1]} times; bursts of {burst}"
    )
    plans: list[tuple[str, dict[str, str], bool]] = []
    if cache_off:
        plans.append(("(a) cache off", {}, False))
    if without_coalescing:
        plans.append(("(b) cache, no coalescing", {"HEADRACE_CACHE_COALESCE": "false"}, True))
    plans.append(
        ("(c) cache + coalescing", {"HEADRACE_CACHE_COALESCE": "true", EVENTS: str(events)}, True)
    )
    runs: list[Run] = []
    for name, extra, cache in plans:
        # each run its own topics and cache namespace: nothing of one serves the next
        run_prefix = f"{prefix}-{len(runs)}"
        rule = TagRule(
            topic=upstream_topic(run_prefix), tag="doc:{id}", tenant=TENANT, fields={"id": "id"}
        )
        env = {
            "HEADRACE_TOPIC_PREFIX": run_prefix,
            "HEADRACE_CACHE_TAG_RULES": json.dumps([rule.model_dump()]),
            **extra,
        }
        runs.append(one_run(name, env, cache, texts, trace, burst))
    return runs


def report(runs: list[Run]) -> None:
    table = Table("run", "computed", "per unique input", "req/s", "p50 ms", "p99 ms")
    for run in runs:
        table.add_row(
            run.name,
            str(run.computed),
            f"{run.passes_per_unique:.2f}",
            f"{run.per_s:.0f}",
            f"{pct(run.latencies_ms, 0.5):.0f}",
            f"{pct(run.latencies_ms, 0.99):.0f}",
        )
    console.print(table)
    off, on = runs[0], runs[-1]
    console.print(
        f"coalescing + cache against {off.name}: throughput {on.per_s / off.per_s:.1f}x, "
        f"p99 {pct(on.latencies_ms, 0.99) / pct(off.latencies_ms, 0.99):.2f}x; forward passes "
        f"per unique input {on.passes_per_unique:.2f} [target 1.00]"
    )
    evictions = on.evictions_ms
    if evictions:
        console.print(
            f"(d) upstream event on its topic -> evicted (L2 and this client's L1), "
            f"{len(evictions)} entries the pipeline wrote: p50 {pct(evictions, 0.5):.1f} ms, p99 "
            f"{pct(evictions, 0.99):.1f} ms [target p99 <= {TARGET_EVICTION_P99_MS:.0f} ms]"
        )


if __name__ == "__main__":
    typer.run(main)
