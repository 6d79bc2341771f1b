"""Jobs that survive their runner, on the real pipeline: a runner pool killed with kill -9
mid-job, another pool takes the job over once the lease ran out and finishes it with every
line answered once and nothing computed twice; a single job whose runner died after
claiming it is carried out by a live pool."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headrace.jobs.launch import new_job
from headrace.jobs.lifecycle import JobStatus
from headrace.jobs.pool import RunnerPool
from headrace.jobs.runner import reply_topic
from headrace.jobs.single import KIND, job_object
from headrace.jobs.store import JobStore
from headrace.ops.processes import Pipeline
from headrace.schemas.messages import Reply
from tests.eventually import eventually
from tests.integration.topics import read_topic
from tests.jobs.test_runner import answered_lines, job_settings, runner_env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
LEASE_S = 4.0


def pool_process(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "headrace.ops.cli", "batch", "runner"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_a_pool_killed_mid_job_is_taken_over_and_every_line_answered_once(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path
) -> None:
    settings = job_settings(shared_prefix, tmp_path)
    source = tmp_path / "lines.txt"
    count = 3000
    source.write_text("\n".join(f"a line to survive its runner {i}" for i in range(count)) + "\n")
    store = JobStore(settings.sql_url)
    job = new_job(store, settings, str(source), input_format="plain")
    env = runner_env(settings, HEADRACE_JOB_LEASE_S=str(LEASE_S))
    first = pool_process(env, tmp_path / "first.log")

    def going() -> bool:
        if first.poll() is not None:
            raise RuntimeError((tmp_path / "first.log").read_text())
        return store.get(job.id).completed >= 300

    eventually(going, 120, "the first pool's first 300 lines", every_s=0.05)
    victim = store.get(job.id).lease_owner
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    killed_at = time.monotonic()
    at_kill = store.get(job.id)
    assert at_kill.state is JobStatus.in_progress and at_kill.completed < count  # mid-job

    second = pool_process(env, tmp_path / "second.log")
    try:
        taken = None
        deadline = time.monotonic() + 240
        while (now := store.get(job.id)).state is not JobStatus.completed:
            if taken is None and now.lease_owner not in (None, victim):
                taken = time.monotonic() - killed_at
            assert second.poll() is None, (tmp_path / "second.log").read_text()
            assert time.monotonic() < deadline, f"not finished: {now.status} {now.completed}"
            time.sleep(0.1)
        finished = time.monotonic() - killed_at
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=60)
    print(f"lease {LEASE_S} s: taken over {taken:.1f} s after the kill, done at {finished:.1f} s")
    assert taken is not None and taken >= LEASE_S * 0.9  # not before the lease ran out
    done = store.get(job.id)
    assert (done.total, done.completed, done.failed) == (count, count, 0)
    answered = answered_lines(Path(done.spool_dir))
    assert len(answered) == count and set(answered.values()) == {1}  # every line once
    replies = collections.Counter(
        Reply.model_validate_json(r.value).request_id
        for r in read_topic(settings, reply_topic(shared_prefix, job.id))
    )
    assert len(replies) == count and set(replies.values()) == {1}  # nothing computed twice


def test_a_single_job_whose_runner_died_is_carried_out_by_a_live_pool(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path
) -> None:
    settings = job_settings(shared_prefix, tmp_path).model_copy(update={"job_lease_s": 2.0})
    store = JobStore(settings.sql_url)
    source = tmp_path / "single.jsonl"
    body = {"model": "all-MiniLM-L6-v2", "input": "one text, its runner gone"}
    line = {"custom_id": "job", "method": "POST", "url": "/v1/embeddings", "body": body}
    source.write_text(json.dumps(line) + "\n")
    orphan = new_job(store, settings, str(source), kind=KIND)
    assert store.claim(orphan.id, "a-runner-that-died", lease_s=2.0)
    fresh = new_job(store, settings, str(source), kind=KIND)
    pool = RunnerPool(store, settings).start()
    try:
        eventually(
            lambda: all(store.get(j.id).state is JobStatus.completed for j in (orphan, fresh)),
            90,
            "both jobs completed",
            every_s=0.1,
        )
    finally:
        pool.close()
    for job_id in (orphan.id, fresh.id):
        view = job_object(store.get(job_id))
        assert view["error"] is None
        assert len(view["response"]["body"]["data"][0]["embedding"]) == 384
    assert store.get(orphan.id).lease_owner != "a-runner-that-died"
