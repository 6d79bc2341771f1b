"""What an idle pipeline costs on the embedded broker, every figure from one run.

tansu answers a parked fetch only when its wait runs out, so a consumer with nothing to read
still fetches every ``kafka_fetch_wait_idle_ms`` (20): CPU in the consumer and the broker for
nothing. After ``kafka_fetch_dormant_after_s`` with nothing awaited a consumer waits
``kafka_fetch_wait_dormant_ms`` instead. The same pipeline (a dispatcher and a worker) and a
client, twice: dormancy off (``kafka_fetch_dormant_after_s`` past the run) and at the
settings' defaults. For each:

- CPU, percent of one core, over ``--seconds`` once everything has been idle past the
  dormant point: the dispatcher, the worker, tansu, and this process
  (the client's reply listener);
- what dormancy costs: a lone request's latency after ``--silence`` seconds of silence, p50
  and the largest of ``--lone`` requests.

    python -m bench.idle [--seconds 20] [--silence 12] [--lone 5]
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field

import typer
from rich.console import Console
from rich.table import Table

from bench import cpu
from bench.stats import pct
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client

console = Console(width=120)
NEVER_S = 1e9  # dormancy off: never that long idle


@dataclass
class Idle:
    name: str
    cpu_percent: dict[str, float]  # process -> percent of one core while idle
    after_silence_ms: list[float] = field(default_factory=list)


def measure(name: str, env: dict[str, str], seconds: float, silence_s: float, lone: int) -> Idle:
    settings = Settings(topic_prefix=env["HEADRACE_TOPIC_PREFIX"])
    dormant_after_s = float(
        env.get("HEADRACE_KAFKA_FETCH_DORMANT_AFTER_S", settings.kafka_fetch_dormant_after_s)
    )
    with Pipeline(env=env) as pipeline, Client(settings, tenant="bench") as client:
        client.embed(["one request, so that every consumer has read"])
        # idle past the eager grace (1 s), and past the dormant point where there is one
        time.sleep(dormant_after_s + 2 if dormant_after_s < NEVER_S else 2)
        pids = {  # the worker's pool is solo or threads: one process
            "dispatcher": pipeline.dispatcher.pid,
            "worker": pipeline.workers[0].pid,
            "tansu": {s.name: s.pid for s in LocalStack(settings).status()}["kafka"],
            "this process (client)": os.getpid(),
        }
        before = cpu.snapshot(pids)
        time.sleep(seconds)
        used = cpu.delta(before, cpu.snapshot(pids))
        result = Idle(name, {k: 100 * v / seconds for k, v in used.items()})
        for i in range(lone):
            time.sleep(silence_s)
            start = time.perf_counter()
            client.submit(f"a lone request after a silence ({i})").result(60)
            result.after_silence_ms.append((time.perf_counter() - start) * 1000)
    return result


def main(
    seconds: float = 20.0, silence: float = 12.0, lone: int = 5, compare: bool = True
) -> list[Idle]:
    """``compare``: also the run with dormancy off (False: the defaults alone)."""
    prefix = f"bench-idle-{uuid.uuid4().hex[:6]}"
    plans = (
        [("dormancy off", {"HEADRACE_KAFKA_FETCH_DORMANT_AFTER_S": str(NEVER_S)})]
        if compare
        else []
    )
    plans.append(("defaults (dormant after 10 s)", {}))
    with LocalStack(Settings(topic_prefix=prefix)).while_needed():
        runs = [
            measure(
                name, {"HEADRACE_TOPIC_PREFIX": f"{prefix}-{i}", **extra}, seconds, silence, lone
            )
            for i, (name, extra) in enumerate(plans)
        ]
    report(runs, seconds, silence)
    return runs


def report(runs: list[Idle], seconds: float, silence: float) -> None:
    names = list(runs[0].cpu_percent)
    table = Table(
        "run", *[f"{n} %" for n in names], "total %", f"lone after {silence:.0f} s p50 / max ms"
    )
    for run in runs:
        total = sum(run.cpu_percent.values())
        lone = run.after_silence_ms
        table.add_row(
            run.name,
            *[f"{run.cpu_percent[n]:.1f}" for n in names],
            f"{total:.1f}",
            f"{pct(lone, 0.5):.0f} / {max(lone):.0f}" if lone else "-",
        )
    console.print(f"idle CPU over {seconds:.0f} s, percent of one core")
    console.print(table)
    if len(runs) == 2:
        off, on = (sum(r.cpu_percent.values()) for r in runs)
        console.print(f"idle CPU with dormancy / without: {on / off:.2f}")


if __name__ == "__main__":
    typer.run(main)
