"""Bulk-job benchmark, every figure from one run on the local stack. The worker runs the
ECHO BACKEND (no model: it tokenises like the real one and answers a 4-number stand-in), so
the figures are of the pipeline path alone: the CPU model could not compute a million lines
here. For each size: a plain input file, one `headrace batch run` process (its RSS sampled
every 0.1 s), the submission rate it logs, and the end-to-end rate.

    python -m bench.bulk [--lines 100000 --lines 1000000] [--window 5000]
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from headrace.config.settings import Settings
from headrace.jobs.launch import new_job
from headrace.jobs.lifecycle import JobStatus
from headrace.jobs.store import JobStore
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline

console = Console()
SUBMITTED = re.compile(r"submitted (\d+) requests in ([\d.]+) s \((\d+)/s\)")


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def run_one(settings: Settings, env: dict[str, str], lines: int, window: int) -> dict[str, float]:
    source = settings.state_dir / f"in-{lines}.txt"
    with open(source, "w", encoding="utf-8") as out:
        for i in range(lines):
            out.write(f"bulk benchmark line {i}: water runs down the headrace to the wheel\n")
    store = JobStore(settings.sql_url)
    job = new_job(store, settings, str(source), input_format="plain")
    started = time.monotonic()
    log_path = settings.state_dir / f"runner-{lines}.log"
    log_file = open(log_path, "wb")  # noqa: SIM115 - closed below (a pipe would fill and block it)
    proc = subprocess.Popen(
        [sys.executable, "-m", "headrace.ops.cli", "batch", "run", job.id, "--window", str(window)],
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    peak = first = 0
    while proc.poll() is None:
        now = rss_kib(proc.pid)
        peak = max(peak, now)
        if not first and time.monotonic() - started > 2:
            first = now
        time.sleep(0.1)
    wall = time.monotonic() - started
    log_file.close()
    log = log_path.read_text(errors="replace")
    done = store.get(job.id)
    if done.state is not JobStatus.completed:
        raise SystemExit(f"job ended {done.status}: {done.errors}\n{log[-3000:]}")
    match = SUBMITTED.search(log)
    return {
        "lines": lines,
        "submit_rate": float(match.group(3)) if match else float("nan"),
        "end_to_end_rate": lines / wall,
        "wall_s": wall,
        "peak_rss_mb": peak / 1024,
        "completed": done.completed,
        "failed": done.failed,
    }


def main(
    lines: list[int] = typer.Option([100_000, 1_000_000], "--lines"),
    window: int = 5000,
) -> None:
    stack = LocalStack(Settings())
    started_stack = not stack.is_up()
    if started_stack:
        stack.up()
    state = Path(tempfile.mkdtemp(prefix="headrace-bulk-"))
    prefix = f"bench-bulk-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix, state_dir=state, sql_url=f"sqlite:///{state}/jobs.db")
    env = {
        **os.environ,
        "HEADRACE_TOPIC_PREFIX": prefix,
        "HEADRACE_STATE_DIR": str(state),
        "HEADRACE_SQL_URL": settings.sql_url,
        "HEADRACE_WORKER_BACKEND": "echo",
        "HEADRACE_MAX_BATCH_TOKENS": "8192",
    }
    rows = []
    try:
        with Pipeline(env=env):
            for n in lines:
                console.print(f"running {n} lines (echo backend) ...")
                rows.append(run_one(settings, env, n, window))
    finally:
        if started_stack:
            stack.down()
    table = Table(title="bulk jobs, ECHO BACKEND (pipeline path only, no model)")
    for col in ("lines", "submitted/s", "end-to-end/s", "wall s", "peak RSS MB", "ok", "failed"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['lines']:.0f}",
            f"{r['submit_rate']:.0f}",
            f"{r['end_to_end_rate']:.0f}",
            f"{r['wall_s']:.1f}",
            f"{r['peak_rss_mb']:.1f}",
            f"{r['completed']:.0f}",
            f"{r['failed']:.0f}",
        )
    console.print(table)
    if len(rows) >= 2:
        growth = rows[-1]["peak_rss_mb"] - rows[0]["peak_rss_mb"]
        console.print(
            f"RSS growth {rows[0]['lines']:.0f} -> {rows[-1]['lines']:.0f} lines: {growth:.1f} MB"
            " (target <= 50 MB); submission target >= 5,000/s"
        )


if __name__ == "__main__":
    typer.run(main)
