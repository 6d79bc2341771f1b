"""Online before bulk, measured: a lone online request every 50 ms, its latency p50/p99 with
no bulk job, while a 100k-line bulk job runs on the bulk lane, and (to compare) while the
same job runs on the online lane, as every job did before lanes. Every figure in one run,
on the local pipeline (one worker per core).

Harvest: the bulk job's rate alone (input tokens/s: lines/s moves with the buckets a few
seconds happen to serve; no online traffic: every worker is idle capacity) is measured for
8 s before the online requests start and for 8 s after they end, and the two
averaged (one 8 s sample on two shared cores was noisy enough to put the share above 1);
beside them, what bulk could get is that rate times the share of worker-seconds online left
idle (1 - online compute / (wall x workers)), and the row says how much of it bulk took.

    python -m bench.lanes [--lines 100000] [--online 200]
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from subprocess import STDOUT, Popen

import typer
from rich.console import Console
from rich.table import Table

from bench.stats import pct
from headrace.config.settings import Settings
from headrace.jobs.launch import new_job
from headrace.jobs.lifecycle import JobStatus
from headrace.jobs.store import JobStore
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import local_pipeline, local_workers
from headrace.ops.sample_texts import long_tail_texts
from headrace.producers.client import Client
from headrace.schemas.messages import Reply
from headrace.schemas.topics import Lane

console = Console(width=120)
SPACING_S = 0.05
ALONE_S = 8.0  # the bulk job's rate alone is measured over this long


def online_latencies(client: Client, count: int) -> tuple[list[float], float]:
    """A lone request every 50 ms: ``paced_latencies`` of long-tail texts."""
    texts = [t[:200] for t in long_tail_texts(count, seed=21)]
    return paced_latencies(client, texts, SPACING_S)


def paced_latencies(
    client: Client, texts: list[str], spacing_s: float
) -> tuple[list[float], float]:
    """One request every ``spacing_s`` (not waiting for the one before); each one's latency
    in ms, and the compute seconds their replies report (lone requests: a batch each,
    about). Prints the latency legs' p50/p99."""
    began: list[float] = []
    ended: dict[int, float] = {}
    futures: list[Future[Reply]] = []
    next_at = time.perf_counter()
    for i, text in enumerate(texts):
        began.append(time.perf_counter())
        future = client.submit(text).future
        future.add_done_callback(_stamp(ended, i))
        futures.append(future)
        next_at += spacing_s
        time.sleep(max(0.0, next_at - time.perf_counter()))
    legs: dict[str, list[float]] = {"queued": [], "batch_wait": [], "compute": []}
    for future in futures:
        reply = future.result(120)
        assert reply.result is not None and reply.timings is not None, reply.error
        legs["queued"].append(reply.timings.queued_ms)
        legs["batch_wait"].append(reply.timings.batch_wait_ms)
        legs["compute"].append(reply.timings.compute_ms)
    console.print(
        "  legs p50/p99 ms: "
        + ", ".join(f"{k} {pct(v, 0.5):.0f}/{pct(v, 0.99):.0f}" for k, v in legs.items())
    )
    busy_s = sum(legs["compute"]) / 1000
    return [(ended[i] - began[i]) * 1000 for i in range(len(texts))], busy_s


def _stamp(ended: dict[int, float], i: int) -> Callable[[Future[Reply]], None]:
    def done(_: Future[Reply]) -> None:
        ended[i] = time.perf_counter()

    return done


def tokens_per_s(store: JobStore, job_id: str, seconds: float) -> float:
    """The job's input tokens answered per second over ``seconds``: tokens, not lines, since
    which buckets a few seconds serve moves lines/s by 2-3x at the same compute (short lines
    are most of the long tail)."""
    before = store.get(job_id).input_tokens
    time.sleep(seconds)
    return (store.get(job_id).input_tokens - before) / seconds


def run_job(
    store: JobStore, settings: Settings, path: Path, lane: Lane
) -> tuple[str, Popen[bytes]]:
    """A job in a runner process of its own, as `headrace batch create` starts one."""
    job = new_job(store, settings, str(path), input_format="plain", tenant="bulk")
    log = open(settings.state_dir / f"runner-{job.id}.log", "wb")  # noqa: SIM115 - the runner's
    argv = [sys.executable, "-m", "headrace.ops.cli", "batch", "run", job.id, "--lane", lane]
    return job.id, Popen(argv, stdout=log, stderr=STDOUT)


Row = tuple[str, list[float], float | None, float | None]  # latencies, tokens/s, harvested


def online_beside_bulk(lines: int, online: int, seed: int = 9) -> list[Row]:
    """On a local pipeline of its own (a fresh topic prefix, the stack already up): the
    online requests' latencies with no bulk job, beside a ``lines``-line job on the bulk
    lane, and beside it on the online lane; the job's rate and its share of idle capacity."""
    prefix = f"bench-lanes-{uuid.uuid4().hex[:6]}"
    env = {"HEADRACE_TOPIC_PREFIX": prefix}
    os.environ.update(env)
    settings = Settings()
    work = settings.state_dir / "bench-lanes"
    work.mkdir(parents=True, exist_ok=True)
    lanes: tuple[Lane, Lane] = ("bulk", "online")
    sources: dict[Lane, Path] = {}  # texts of their own for each job: the second is not
    for k, lane in enumerate(lanes):  # served from the result cache the first one filled
        sources[lane] = work / f"bulk-{lane}.txt"
        texts = long_tail_texts(lines, seed=seed + k)
        sources[lane].write_text("\n".join(t.replace("\n", " ") for t in texts))
    os.environ["HEADRACE_SQL_URL"] = f"sqlite:///{work}/jobs-{prefix}.db"
    store = JobStore(os.environ["HEADRACE_SQL_URL"])
    rows: list[Row] = []
    with (
        local_pipeline(env, settings.device, settings.torch_threads),
        Client(settings, tenant="online") as client,
    ):
        client.embed(["warm the connections"])
        rows.append(("no bulk job", online_latencies(client, online)[0], None, None))
        workers = local_workers(settings.device, settings.torch_threads)
        for lane in lanes:
            job_id, runner = run_job(store, settings, sources[lane], lane)
            while store.get(job_id).completed < 500:  # flowing
                time.sleep(0.2)
            alone_before = tokens_per_s(store, job_id, ALONE_S)  # every worker idle
            before = store.get(job_id).input_tokens
            began = time.perf_counter()
            latencies, online_busy_s = online_latencies(client, online)
            wall = time.perf_counter() - began
            rate = (store.get(job_id).input_tokens - before) / wall
            idle_share = max(0.0, 1 - online_busy_s / (wall * workers))
            alone_after = tokens_per_s(store, job_id, ALONE_S)
            alone = (alone_before + alone_after) / 2
            console.print(
                f"  the job on the {lane} lane alone: {alone_before:,.0f} tokens/s before the "
                f"online requests, {alone_after:.0f} after"
            )
            store.move(job_id, JobStatus.cancelling)
            runner.wait(120)
            label = f"{lines:,}-line job on the {lane} lane" + (
                " (no lanes)" if lane == "online" else ""
            )
            rows.append((label, latencies, rate, rate / (alone * idle_share)))
    return rows


def print_rows(rows: list[Row], online: int) -> None:
    base = pct(rows[0][1], 0.99)
    table = Table(
        "while",
        "online p50 ms",
        "online p99 ms",
        "p99 vs no bulk",
        "bulk tokens/s",
        "of idle capacity",
    )
    for label, latencies, tokens_per_second, harvested in rows:
        p99 = pct(latencies, 0.99)
        table.add_row(
            label,
            f"{statistics.median(latencies):.1f}",
            f"{p99:.1f}",
            f"{p99 / base:.2f}",
            "-" if tokens_per_second is None else f"{tokens_per_second:,.0f}",
            "-" if harvested is None else f"{harvested:.2f}",
        )
    console.print(f"{online} lone online requests every {SPACING_S * 1000:.0f} ms per row")
    console.print(table)


def main(lines: int = 100_000, online: int = 200, seed: int = 9) -> None:
    with LocalStack(Settings()).while_needed():
        rows = online_beside_bulk(lines, online, seed)
    print_rows(rows, online)


if __name__ == "__main__":
    typer.run(main)
