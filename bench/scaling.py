"""Autoscaling, simulated: a bursty day replayed against the scaling policy that
infra/k8s/scaling.yaml deploys (``headrace.ops.scaling``), with what a worker costs taken
from this machine.

- the trace: a base rate, +300% (4x) in the five minutes before each hour (the seed's
  case), Poisson arrivals, one-second steps;
- a worker: serves ``1 / seconds_per_request`` requests per second (measured: MiniLM over
  the long-tail mix in bucket-sized batches, one torch thread) and becomes ready
  ``cold_start_s`` after it is started (measured: a real ``headrace worker`` process from
  its start to READY, model load and warm-up included);
- the signals, polled every ``polling_s``: the backlog times seconds per request (what the
  dispatcher exports as ``headrace_dispatcher_queued_work_seconds``) and the busy workers
  over the last minute (what ``rate(headrace_batch_compute_seconds_sum[1m])`` gives).

Compared with fixed fleets sized for the peak (80% busy at peak) and for the mean: p50/p99
latency and worker-seconds (a worker costs from its start, warm-up included).

    python -m bench.scaling [--hours 3] [--cold-start-s S] [--seconds-per-request S]
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from dataclasses import dataclass

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.ops.scaling import Autoscaler, ScalingPolicy, Schedule

console = Console(width=120)
BURST = 4.0  # +300%
BURST_S = 300  # the five minutes before each hour


def rate_at(t: float, base_rps: float) -> float:
    return base_rps * (BURST if t % 3600 >= 3600 - BURST_S else 1.0)


@dataclass
class Outcome:
    name: str
    p50_s: float
    p99_s: float
    max_s: float
    worker_s: float
    peak_workers: int


def simulate(
    name: str,
    hours: float,
    base_rps: float,
    per_request_s: float,
    cold_start_s: float,
    scaler: Autoscaler | None,
    fixed: int,
    seed: int,
) -> Outcome:
    rng = random.Random(seed)
    queue: deque[list[float]] = deque()  # [arrival second, requests left]
    latencies: dict[int, float] = {}  # latency (whole seconds, +service) -> requests
    ready = fixed if scaler is None else scaler.replicas
    starting: deque[float] = deque()  # when each starting worker becomes ready
    worker_s = 0.0
    peak = ready
    backlog = 0.0
    busy: deque[float] = deque(maxlen=60)  # device-seconds computed in each of the last 60 s
    for step in range(int(hours * 3600)):
        t = float(step)
        while starting and starting[0] <= t:
            starting.popleft()
            ready += 1
        if scaler is not None and step % int(scaler.policy.polling_s) == 0:
            busy_workers = sum(busy) / len(busy) if busy else 0.0
            wanted = scaler.step(t, backlog * per_request_s, busy_workers)
            have = ready + len(starting)
            for _ in range(max(0, wanted - have)):
                starting.append(t + cold_start_s)
            for _ in range(max(0, have - wanted)):  # stop the newest first
                if starting:
                    starting.pop()
                else:
                    ready -= 1
        arrived = _poisson(rng, rate_at(t, base_rps))
        if arrived:
            queue.append([t, float(arrived)])
            backlog += arrived
        capacity = ready / per_request_s  # requests this second
        served_now = 0.0
        while capacity > 0 and queue:
            cohort = queue[0]
            served = min(capacity, cohort[1])
            waited = int(t - cohort[0])
            latencies[waited] = latencies.get(waited, 0.0) + served
            cohort[1] -= served
            capacity -= served
            backlog -= served
            served_now += served
            if cohort[1] <= 1e-9:
                queue.popleft()
        busy.append(served_now * per_request_s)
        worker_s += ready + len(starting)
        peak = max(peak, ready + len(starting))
    return Outcome(
        name,
        _quantile(latencies, 0.5) + per_request_s,
        _quantile(latencies, 0.99) + per_request_s,
        max(latencies, default=0) + per_request_s,
        worker_s,
        peak,
    )


def _poisson(rng: random.Random, mean: float) -> int:
    if mean > 50:  # normal approximation: exact enough, and fast
        return max(0, round(rng.gauss(mean, math.sqrt(mean))))
    limit, k, p = math.exp(-mean), 0, 1.0
    while True:
        p *= rng.random()
        if p < limit:
            return k
        k += 1


def _quantile(counts: dict[int, float], q: float) -> float:
    total = sum(counts.values())
    seen = 0.0
    for waited in sorted(counts):
        seen += counts[waited]
        if seen >= q * total:
            return float(waited)
    return 0.0


def measure_seconds_per_request(count: int = 400) -> float:
    """MiniLM, one torch thread, the long-tail mix in batches sorted by length (about what
    the dispatcher forms)."""
    from headrace.ops.sample_texts import long_tail_texts
    from headrace.workers.loading import load_backend

    settings = Settings(torch_threads=1)
    backend = load_backend(settings, [settings.buckets[0]])
    texts = sorted(long_tail_texts(count, seed=11), key=len)
    start = time.perf_counter()
    for i in range(0, len(texts), 32):
        group = texts[i : i + 32]
        backend.embed(backend.encode(group, [False] * len(group)), [True] * len(group))  # type: ignore[attr-defined]
    return (time.perf_counter() - start) / len(texts)


def measure_cold_start_s() -> float:
    """A real worker process (the local stack's Redis and broker), from its start to READY."""
    import uuid

    from headrace.ops.localstack import LocalStack
    from headrace.ops.processes import Proc

    settings = Settings()
    stack = LocalStack(settings)
    started = not stack.is_up()
    if started:
        stack.up()
    try:
        env = {
            **__import__("os").environ,
            "HEADRACE_TOPIC_PREFIX": f"bench-cold-{uuid.uuid4().hex[:6]}",
        }
        env["HEADRACE_TORCH_THREADS"] = "1"
        worker = Proc(
            "cold-start", ["worker", "--buckets", "all"], env, settings.state_dir / "logs"
        )
        begun = time.perf_counter()
        worker.start()
        took = time.perf_counter() - begun
        worker.stop()
        return took
    finally:
        if started:
            stack.down()


def main(
    hours: float = 3.0,
    cold_start_s: float | None = typer.Option(None, help="skip measuring it"),
    seconds_per_request: float | None = typer.Option(None, help="skip measuring it"),
    base_workers: float = typer.Option(2.0, help="base rate, in workers' worth of work"),
    seed: int = 3,
) -> None:
    per_request = seconds_per_request or measure_seconds_per_request()
    cold = cold_start_s if cold_start_s is not None else measure_cold_start_s()
    base_rps = base_workers / per_request
    policy = ScalingPolicy()
    peak_rps = base_rps * BURST
    mean_rps = base_rps * (1 + (BURST - 1) * BURST_S / 3600)
    fixed_peak = math.ceil(peak_rps * per_request / 0.8)
    fixed_mean = math.ceil(mean_rps * per_request)
    # the cron trigger of infra/k8s/scaling.yaml: the peak fleet from 2 minutes before the
    # burst (enough for a cold start) to its end
    lead_min = max(1, math.ceil((cold + policy.polling_s) / 60))
    burst_start = 60 - BURST_S // 60
    schedule = Schedule(burst_start - lead_min, 60, fixed_peak)
    prescaled = ScalingPolicy(schedule=schedule)
    runs = [
        simulate(
            "fixed, sized for the peak", hours, base_rps, per_request, cold, None, fixed_peak, seed
        ),
        simulate(
            "fixed, sized for the mean", hours, base_rps, per_request, cold, None, fixed_mean, seed
        ),
        simulate(
            "autoscaled on queued work",
            hours,
            base_rps,
            per_request,
            cold,
            Autoscaler(policy, replicas=policy.min_workers),
            0,
            seed,
        ),
        simulate(
            "autoscaled + the burst scheduled",
            hours,
            base_rps,
            per_request,
            cold,
            Autoscaler(prescaled, replicas=prescaled.min_workers),
            0,
            seed,
        ),
    ]
    console.print(
        f"trace: {hours:g} h, {base_rps:,.0f} req/s base, x{BURST:g} in the last {BURST_S // 60} "
        f"min of each hour; a worker: {per_request * 1000:.2f} ms a request "
        f"({1 / per_request:,.0f} req/s), cold start {cold:.1f} s (measured here unless given); "
        f"policy: {policy.threshold_s:g} s of queued work per worker, polled every "
        f"{policy.polling_s:g} s; scheduled: {schedule.workers} workers from minute "
        f"{schedule.start_minute} of each hour"
    )
    table = Table("fleet", "p50 s", "p99 s", "max s", "worker-s", "vs peak-sized", "most workers")
    for r in runs:
        table.add_row(
            r.name,
            f"{r.p50_s:.2f}",
            f"{r.p99_s:.2f}",
            f"{r.max_s:.1f}",
            f"{r.worker_s:,.0f}",
            f"{r.worker_s / runs[0].worker_s:.2f}",
            str(r.peak_workers),
        )
    console.print(table)


if __name__ == "__main__":
    typer.run(main)
