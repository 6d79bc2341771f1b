"""A bulk job beside online traffic on the real pipeline (issue 39's bench (c), with a
generous bound): lone online requests every 50 ms keep a p90 within a few times their p90
with no job running while a job runs on the bulk lane; the same job on the online lane (the
control: every job ran there before lanes) makes them wait behind its lines and fails that
bound. The job is the online requests' own tenant's, so fair share across tenants does not
separate them: only the lane does. Both runs, and the bound, in one pipeline and one test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest

from headrace.config.settings import Settings
from headrace.jobs.launch import new_job
from headrace.jobs.lifecycle import JobStatus
from headrace.jobs.store import JobStore
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
LINES = 4000  # ~15 s of work on 2 cores: long beside an online request (~0.1 s)
ONLINE = 30
SPACING_S = 0.05
BOUND = 4.0  # online p90 beside the job / alone; the bench's p99 ratio is ~1.3, FIFO's ~100
FLOOR_S = 0.75  # ... or this long, whichever is more (the machine is shared)


def online_p90_s(client: Client, tag: str) -> float:
    """``ONLINE`` lone requests, one every 50 ms (not waiting for the one before): their
    latencies' p90, in seconds (not the p99: of 30 that is the slowest, one hiccup of a shared
    machine)."""
    began: list[float] = []
    ended: dict[int, float] = {}
    subs = []

    def stamp(i: int, _: object) -> None:
        ended[i] = time.perf_counter()

    for i in range(ONLINE):
        began.append(time.perf_counter())
        sub = client.submit(f"an online question {tag} {i} about the weir")
        sub.future.add_done_callback(partial(stamp, i))
        subs.append(sub)
        time.sleep(SPACING_S)
    for sub in subs:
        reply = sub.result(120)
        assert reply.result is not None, reply.error
    latencies = sorted(ended[i] - began[i] for i in range(ONLINE))
    return latencies[int(0.9 * ONLINE) - 1]


def flowing(store: JobStore, job_id: str) -> bool:
    """The job has answered its first lines, and has most of them still to come."""
    return store.get(job_id).completed >= 200


def test_online_p90_holds_beside_a_bulk_job_and_not_when_the_job_runs_online(
    stack: LocalStack, tmp_path: Path
) -> None:
    prefix = unique_prefix("job-online")
    env = pipeline_env(prefix, HEADRACE_MAX_BATCH_TOKENS="256")
    sql_url = f"sqlite:///{tmp_path}/jobs.db"
    settings = Settings(
        topic_prefix=prefix, max_batch_tokens=256, sql_url=sql_url, state_dir=tmp_path / "state"
    )
    source = tmp_path / "bulk.txt"
    source.write_text(
        "\n".join(f"bulk line {i} " + "about the river " * (i % 6) for i in range(LINES)) + "\n"
    )
    store = JobStore(sql_url)
    runner_env = {
        **os.environ,
        **env,
        "HEADRACE_SQL_URL": sql_url,
        "HEADRACE_STATE_DIR": str(settings.state_dir),
    }
    p90: dict[str, float] = {}
    left: dict[str, tuple[int, int]] = {}  # job lines left as the online requests began, ended
    with Pipeline(env=env) as pipeline, Client(settings, tenant="users") as online:
        online.embed(["warm the connections"])
        p90["warm-up"] = online_p90_s(online, "warm-up")  # every bucket's first batches
        p90["alone"] = online_p90_s(online, "alone")
        for lane in ("bulk", "online"):
            job = new_job(store, settings, str(source), input_format="plain", tenant="users")
            runner = subprocess.Popen(
                [sys.executable, "-m", "headrace.ops.cli", "batch", "run", job.id, "--lane", lane],
                env=runner_env,
            )
            try:
                eventually(partial(flowing, store, job.id), 120, f"the job on {lane}")
                began_with = LINES - store.get(job.id).completed
                p90[lane] = online_p90_s(online, lane)
                left[lane] = (began_with, LINES - store.get(job.id).completed)
            finally:
                store.move(job.id, JobStatus.cancelling)
                runner.wait(120)
        assert all(p.alive() for p in [pipeline.dispatcher, *pipeline.workers])
    print(
        "online p90 s:",
        {k: round(v, 3) for k, v in p90.items()},
        "job lines left as the online requests began and ended:",
        left,
    )
    # the job ran all along: most of it was left when they began, some when they ended
    assert all(began > LINES // 2 and ended > 0 for began, ended in left.values()), left
    bound = max(BOUND * p90["alone"], FLOOR_S)
    assert p90["bulk"] <= bound
    assert p90["online"] > bound  # the control: in arrival order it fails
