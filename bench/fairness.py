"""Fair share across tenants, measured on the local pipeline (every figure in one run):

(a) a quiet tenant sends one request every ``--spacing-ms``, alone, then beside a noisy
    tenant that sends ten times as many in bursts (every ``--burst-every-s``): the quiet
    tenant's p50/p99, with fair share and with arrival order (``HEADRACE_FAIR_SHARE=false``);
(b) two tenants of weights 3 and 1 (``headrace limits set``), both keeping a deep backlog:
    the tokens each was served in every 10 s window after a 5 s warm-up, and their ratio.

Batches of ``--batch-tokens`` padded tokens (a batch cannot be interrupted: a quiet request
waits for what its workers are computing when it comes).

    python -m bench.fairness [--seconds 20] [--spacing-ms 50] [--burst-every-s 5]
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.table import Table

from bench.pipeline import pct
from headrace import connections
from headrace.config.settings import Settings
from headrace.limits.policy import TenantLimits
from headrace.limits.store import LimitsStore
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import local_pipeline
from headrace.producers.client import Client
from headrace.schemas.messages import Reply

console = Console(width=120)
TEXT = "how long is the headrace of the old mill by the river"  # one length for everyone
NOISE_FACTOR = 10
WINDOW_S = 10.0


def quiet_latencies(client: Client, seconds: float, spacing_s: float) -> list[float]:
    """One request every ``spacing_s`` (not waiting for the one before) for ``seconds``;
    each one's latency in ms."""
    began: list[float] = []
    ended: dict[int, float] = {}
    futures: list[Future[Reply]] = []
    next_at = time.perf_counter()
    stop_at = next_at + seconds
    while next_at < stop_at:
        i = len(began)
        began.append(time.perf_counter())
        future = client.submit(f"{TEXT} {i}").future
        future.add_done_callback(_stamp(ended, i))
        futures.append(future)
        next_at += spacing_s
        time.sleep(max(0.0, next_at - time.perf_counter()))
    for future in futures:
        reply = future.result(120)
        assert reply.result is not None, reply.error
    return [(ended[i] - began[i]) * 1000 for i in range(len(began))]


def _stamp(ended: dict[int, float], i: int) -> Callable[[Future[Reply]], None]:
    def done(_: Future[Reply]) -> None:
        ended[i] = time.perf_counter()

    return done


@contextmanager
def bursts(client: Client, per_s: float, every_s: float) -> Iterator[list[Future[Reply]]]:
    """``per_s`` requests a second, sent all at once every ``every_s``, until the block
    ends; then every one of them is awaited."""
    stop = threading.Event()
    sent: list[Future[Reply]] = []

    def flood() -> None:
        n = 0
        while not stop.is_set():
            texts = [f"{TEXT} noise {n + k}" for k in range(int(per_s * every_s))]
            sent.extend(s.future for s in client.submit_many(texts))
            n += len(texts)
            stop.wait(every_s)

    thread = threading.Thread(target=flood, name="noisy", daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        stop.set()
        thread.join()
        for future in sent:
            future.result(300)


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


def scenario_a(
    settings: Settings, env: dict[str, str], seconds: float, spacing_s: float, every_s: float
) -> tuple[list[float], list[float]]:
    """(quiet alone, quiet beside the noisy tenant) latencies, ms."""
    with (
        local_pipeline(env, settings.device, settings.torch_threads),
        Client(settings, tenant="quiet") as quiet,
        Client(settings, tenant="noisy") as noisy,
    ):
        quiet.embed(["warm the connections"])
        noisy.embed(["warm the connections"])
        alone = quiet_latencies(quiet, seconds, spacing_s)
        with bursts(noisy, NOISE_FACTOR / spacing_s, every_s):
            beside = quiet_latencies(quiet, seconds, spacing_s)
    return alone, beside


def main(
    seconds: float = 20.0,
    spacing_ms: float = 50.0,
    burst_every_s: float = 5.0,
    batch_tokens: int = 256,
    share_seconds: float = 40.0,
) -> None:
    settings = Settings()
    stack = LocalStack(settings)
    started = not stack.is_up()
    if started:
        stack.up()
    rows: list[tuple[str, list[float]]] = []
    try:
        for fair in (True, False):
            prefix = f"bench-fair-{uuid.uuid4().hex[:6]}"
            env = {
                "HEADRACE_TOPIC_PREFIX": prefix,
                "HEADRACE_FAIR_SHARE": str(fair).lower(),
                "HEADRACE_MAX_BATCH_TOKENS": str(batch_tokens),
            }
            os.environ.update(env)
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
    finally:
        if started:
            stack.down()
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
    shares = Table("(b) window", "gold (weight 3)", "plain (weight 1)", "gold / plain")
    for w, (g, p) in enumerate(zip(served["gold"], served["plain"], strict=True)):
        ratio = f"{g / p:.2f}" if p else "-"
        shares.add_row(f"{w * WINDOW_S:g}-{(w + 1) * WINDOW_S:g} s", str(g), str(p), ratio)
    console.print(
        f"(b) requests answered per {WINDOW_S:g} s window after a 5 s warm-up, both "
        "tenants saturating"
    )
    console.print(shares)


if __name__ == "__main__":
    typer.run(main)
