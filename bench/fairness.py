"""Fair share across tenants, measured on the local pipeline (every figure in one run):

(a) a quiet tenant sends one request every ``--spacing-ms``, alone, then beside a noisy
    tenant that sends ten times as many in bursts (every ``--burst-every-s``): the quiet
    tenant's p50/p99, with fair share and with arrival order (``HEADRACE_FAIR_SHARE=false``);
(a') a quiet request sent just behind a 1,500-request flood of the noisy tenant: its latency
    as a share of the time the flood still took (what tests/integration/test_fairness.py
    bounds), with fair share and with arrival order;
(b) two tenants of weights 3 and 1 (``headrace limits set``), both keeping a deep backlog:
    the tokens each was served in every 10 s window after a 5 s warm-up, and their ratio;
(c) lone online requests every 50 ms with no bulk job, beside a ``--bulk-lines`` job on
    the bulk lane, and beside it on the online lane (no lanes): their p50/p99, the job's
    rate and its share of the worker-seconds online left idle (``bench.lanes``);
(d) the continuous decoder (the test LM, in this process) full of ``batch`` rows of 256
    tokens: an interactive request's time to first token, with preemption and without.

Batches of ``--batch-tokens`` padded tokens (a batch cannot be interrupted: a quiet request
waits for what its workers are computing when it comes).

    python -m bench.fairness [--seconds 20] [--spacing-ms 50] [--burst-every-s 5]
                             [--bulk-lines 20000] [--bulk-online 100]
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from bench.lanes import online_beside_bulk, paced_latencies, print_rows
from bench.stats import pct
from headrace import connections
from headrace.config.settings import Settings
from headrace.limits.policy import TenantLimits
from headrace.limits.store import LimitsStore
from headrace.models import tiny_lm
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import local_pipeline
from headrace.producers.client import Client
from headrace.schemas.messages import Reply
from headrace.schemas.params import GenerateParams
from headrace.workers.backends.generation import GenerationBackend

console = Console(width=120)
TEXT = "how long is the headrace of the old mill by the river"  # one length for everyone
NOISE_FACTOR = 10
WINDOW_S = 10.0


def quiet_latencies(client: Client, seconds: float, spacing_s: float) -> list[float]:
    """One request every ``spacing_s`` for ``seconds``; each one's latency in ms."""
    texts = [f"{TEXT} {i}" for i in range(round(seconds / spacing_s))]
    return paced_latencies(client, texts, spacing_s)[0]


def _flood_process(env: dict[str, str], per_s: float, every_s: float, stop: Any) -> None:
    """The noisy tenant, in a process of its own (its serialising does not hold the quiet
    client's interpreter lock): a burst of ``per_s x every_s`` requests every ``every_s``
    until ``stop`` is set, then every reply awaited."""
    os.environ.update(env)
    with Client(Settings(), tenant="noisy") as client:
        sent: list[Future[Reply]] = []
        n = 0
        while not stop.is_set():
            texts = [f"{TEXT} noise {n + k}" for k in range(int(per_s * every_s))]
            sent.extend(s.future for s in client.submit_many(texts))
            n += len(texts)
            stop.wait(every_s)
        for future in sent:
            future.result(300)


@contextmanager
def bursts(env: dict[str, str], per_s: float, every_s: float) -> Iterator[None]:
    """The noisy tenant's bursts while the block runs (``_flood_process``)."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    process = context.Process(target=_flood_process, args=(env, per_s, every_s, stop))
    process.start()
    try:
        yield
    finally:
        stop.set()
        process.join(300)


def share_windows(clients: dict[str, Client], seconds: float, backlog: int) -> dict[str, list[int]]:
    """Each tenant keeps ``backlog`` requests waiting for ``seconds``; requests answered per
    tenant in each ``WINDOW_S`` window (every request the same length: tokens alike)."""
    start = time.perf_counter()
    answered: dict[str, list[float]] = {name: [] for name in clients}
    lock = threading.Lock()
    open_: dict[str, int] = dict.fromkeys(clients, 0)

    def on_reply(name: str) -> Callable[[Future[Reply]], None]:
        def done(_: Future[Reply]) -> None:
            with lock:
                answered[name].append(time.perf_counter() - start)
                open_[name] -= 1

        return done

    end = start + seconds
    while time.perf_counter() < end:  # the warm-up's answers count before 0: in no window
        for name, client in clients.items():
            with lock:
                short = backlog - open_[name]
                open_[name] += max(0, short)
            if short > 0:
                for sub in client.submit_many([f"{TEXT} {name}"] * short):
                    sub.future.add_done_callback(on_reply(name))
        time.sleep(0.05)
    windows = int(seconds // WINDOW_S)
    return {
        name: [
            sum(1 for t in times if w * WINDOW_S <= t < (w + 1) * WINDOW_S) for w in range(windows)
        ]
        for name, times in answered.items()
    }


def flood_run(settings: Settings, env: dict[str, str]) -> float:
    with (
        local_pipeline(env, settings.device, settings.torch_threads),
        Client(settings, tenant="quiet") as quiet,
        Client(settings, tenant="noisy") as noisy,
    ):
        quiet.embed(["warm the connections"])
        noisy.embed(["warm the connections"])
        return flood_share(noisy, quiet)


def scenario_a(
    settings: Settings, env: dict[str, str], seconds: float, spacing_s: float, every_s: float
) -> tuple[list[float], list[float]]:
    """(quiet alone, quiet beside the noisy tenant) latencies, ms."""
    with (
        local_pipeline(env, settings.device, settings.torch_threads),
        Client(settings, tenant="quiet") as quiet,
    ):
        quiet.embed(["warm the connections"])
        alone = quiet_latencies(quiet, seconds, spacing_s)
        with bursts(env, NOISE_FACTOR / spacing_s, every_s):
            beside = quiet_latencies(quiet, seconds, spacing_s)
    return alone, beside


def flood_share(client_noisy: Client, client_quiet: Client, flood: int = 1500) -> float:
    """A quiet request sent once the flood flows: its latency over the flood's rest."""
    texts = [f"{TEXT} flood {i}" for i in range(flood)]
    sent = client_noisy.submit_many(texts)
    while sum(s.future.done() for s in sent) < 50:
        time.sleep(0.01)
    began = time.perf_counter()
    reply = client_quiet.submit(f"{TEXT} behind the flood").result(120)
    latency = time.perf_counter() - began
    assert reply.result is not None, reply.error
    for submission in sent:
        submission.result(300)
    return latency / (time.perf_counter() - began)


def time_to_first_token(preempt: bool, rows: int = 8, long_tokens: int = 256) -> float:
    """ms from an interactive request's arrival to its first token, with the decode loop
    full of ``rows`` batch-class rows of ``long_tokens`` tokens (test LM, CPU)."""
    backend = GenerationBackend(
        tiny_lm.NAME,
        tiny_lm.ensure(tiny_lm.cache_dir()),
        tiny_lm.MAX_POSITIONS,
        device="cpu",
        continuous_rows=rows,
    )
    backend.load_weights()
    backend.build()
    decoder = backend.decoder
    assert decoder is not None
    decoder.preempt = preempt
    try:
        items = backend.encode(
            [f"the water runs to mill {i}" for i in range(rows + 1)], [False] * (rows + 1)
        )
        batch = [dataclasses.replace(item, rank=2) for item in items[:rows]]
        long = [GenerateParams(max_tokens=long_tokens)] * rows
        thread = threading.Thread(target=backend.generate, args=(batch, long))
        thread.start()
        while decoder.steps < 5:
            time.sleep(0.001)
        first: list[float] = []
        began = time.perf_counter()
        backend.generate(
            [dataclasses.replace(items[rows], rank=0)],
            [GenerateParams(max_tokens=8, stream=True)],
            on_delta=lambda _, __: first.append(time.perf_counter()) if not first else None,
        )
        thread.join(300)
        return (first[0] - began) * 1000
    finally:
        backend.close()


def main(
    seconds: float = 20.0,
    spacing_ms: float = 50.0,
    burst_every_s: float = 5.0,
    batch_tokens: int = 256,
    share_seconds: float = 40.0,
    bulk_lines: int = 20_000,
    bulk_online: int = 100,
) -> None:
    rows: list[tuple[str, list[float]]] = []
    shares: list[tuple[bool, float]] = []
    ttft = {preempt: time_to_first_token(preempt) for preempt in (True, False)}
    with LocalStack(Settings()).while_needed():
        for fair in (True, False):
            prefix = f"bench-fair-{uuid.uuid4().hex[:6]}"
            env = {
                "HEADRACE_TOPIC_PREFIX": prefix,
                "HEADRACE_FAIR_SHARE": str(fair).lower(),
                "HEADRACE_MAX_BATCH_TOKENS": str(batch_tokens),
            }
            os.environ.update(env)
            shares.append((fair, flood_run(Settings(), env)))
            alone, beside = scenario_a(Settings(), env, seconds, spacing_ms / 1000, burst_every_s)
            order = "fair share" if fair else "arrival order"
            rows += [(f"{order}: quiet alone", alone), (f"{order}: beside noisy", beside)]
        prefix = f"bench-fair-{uuid.uuid4().hex[:6]}"
        env = {
            "HEADRACE_TOPIC_PREFIX": prefix,
            "HEADRACE_FAIR_SHARE": "true",
            "HEADRACE_MAX_BATCH_TOKENS": str(batch_tokens),
        }
        os.environ.update(env)
        settings = Settings()
        limits = LimitsStore(connections.redis_client(settings), prefix, settings.quota_window_s)
        limits.set_limits("gold", TenantLimits(weight=3.0))
        with (
            local_pipeline(env, settings.device, settings.torch_threads),
            Client(settings, tenant="gold") as gold,
            Client(settings, tenant="plain") as plain,
        ):
            gold.embed(["warm"])
            plain.embed(["warm"])
            served = share_windows({"gold": gold, "plain": plain}, share_seconds, backlog=1500)
        os.environ.pop("HEADRACE_MAX_BATCH_TOKENS")  # (c) as the pipeline runs by default
        beside_bulk = online_beside_bulk(bulk_lines, bulk_online)
    table = Table("(a) quiet tenant", "requests", "p50 ms", "p99 ms", "p99 / alone")
    for i, (label, latencies) in enumerate(rows):
        alone_p99 = pct(rows[i - i % 2][1], 0.99)
        table.add_row(
            label,
            str(len(latencies)),
            f"{pct(latencies, 0.5):.1f}",
            f"{pct(latencies, 0.99):.1f}",
            f"{pct(latencies, 0.99) / alone_p99:.2f}",
        )
    console.print(
        f"(a) quiet: one request every {spacing_ms:g} ms for {seconds:g} s; noisy: "
        f"{NOISE_FACTOR}x as many, in a burst every {burst_every_s:g} s; batches of "
        f"{batch_tokens} padded tokens"
    )
    console.print(table)
    console.print(
        "(a') a quiet request just behind a 1,500-request flood: its latency / the flood's "
        "remaining time: "
        + ", ".join(f"{'fair share' if f else 'arrival order'} {v:.2f}" for f, v in shares)
    )
    shares_table = Table("(b) window", "gold (weight 3)", "plain (weight 1)", "gold / plain")
    for w, (g, p) in enumerate(zip(served["gold"], served["plain"], strict=True)):
        ratio = f"{g / p:.2f}" if p else "-"
        shares_table.add_row(f"{w * WINDOW_S:g}-{(w + 1) * WINDOW_S:g} s", str(g), str(p), ratio)
    console.print(
        f"(b) requests answered per {WINDOW_S:g} s window after a 5 s warm-up, both "
        "tenants saturating"
    )
    console.print(shares_table)
    console.print("(c) online latency beside a bulk job (default batches)")
    print_rows(beside_bulk, bulk_online)
    console.print(
        "(d) interactive time to first token, the decoder full of 8 batch rows of 256 "
        f"tokens (test LM, CPU): with preemption {ttft[True]:.1f} ms, without "
        f"{ttft[False]:.1f} ms ({ttft[False] / ttft[True]:.1f}x)"
    )


if __name__ == "__main__":
    typer.run(main)
