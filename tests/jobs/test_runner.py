"""Bulk jobs through the real pipeline (tansu, Redis, SeaweedFS, a dispatcher and a worker
with the model): OpenAI-format round trip, invalid lines, resume after kill -9, cancel."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from headrace import connections
from headrace.config.settings import Settings
from headrace.jobs import finish as finish_module
from headrace.jobs.files import read_lines
from headrace.jobs.launch import new_job
from headrace.jobs.lifecycle import JobStatus
from headrace.jobs.run_options import RunOptions
from headrace.jobs.runner import JobRunner, reply_topic
from headrace.jobs.store import JobStore
from headrace.ops.processes import Pipeline
from headrace.schemas.messages import EmbeddingResult, Reply
from headrace.transport import open_transport
from tests.eventually import eventually

pytestmark = pytest.mark.timeout(300)


def job_settings(shared_prefix: str, tmp_path: Path, sql_url: str | None = None) -> Settings:
    return Settings(
        topic_prefix=shared_prefix,
        state_dir=tmp_path / "state",
        sql_url=sql_url or f"sqlite:///{tmp_path}/jobs.db",
        max_batch_tokens=1024,
    )


def runner_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a runner process for the jobs of ``settings``."""
    return {
        **os.environ,
        "HEADRACE_TOPIC_PREFIX": settings.topic_prefix,
        "HEADRACE_STATE_DIR": str(settings.state_dir),
        "HEADRACE_SQL_URL": settings.sql_url,
        **extra,
    }


def openai_line(
    custom_id: str, text: object, url: str = "/v1/embeddings", model: str = "all-MiniLM-L6-v2"
) -> str:
    return json.dumps(
        {
            "custom_id": custom_id,
            "method": "POST",
            "url": url,
            "body": {"model": model, "input": text},
        }
    )


def answered_lines(job_spool: Path) -> collections.Counter[str]:
    """custom_id -> how many output and error lines answer it."""
    counts: collections.Counter[str] = collections.Counter()
    for name in ("output.jsonl", "errors.jsonl"):
        path = job_spool / name
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                counts[json.loads(line)["custom_id"]] += 1
    return counts


def lines_counted(outcome: str) -> float:
    """headrace_bulk_lines_total{outcome} in this process's registry."""
    value = REGISTRY.get_sample_value("headrace_bulk_lines_total", {"outcome": outcome})
    return value or 0.0


def test_openai_batch_round_trip(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path, store_url: str
) -> None:
    settings = job_settings(shared_prefix, tmp_path, store_url)
    lines = [openai_line(f"c{i}", f"sentence number {i} about rivers") for i in range(40)]
    lines += [
        "{not json",
        openai_line("empty", ""),
        openai_line("chat", "hi", url="/v1/chat/completions"),
        openai_line("long", "word " * 2000),
        openai_line("nomodel", "hi", model="no-such-model"),
    ]
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bucket = f"t-batch-{uuid.uuid4().hex[:8]}"
    connections.s3_client(settings).create_bucket(Bucket=bucket)
    store = JobStore(settings.sql_url)
    job = new_job(
        store,
        settings,
        str(source),
        tenant="acme",
        output_location=f"s3://{bucket}/out.jsonl.zst",
        error_location=str(tmp_path / "errors.jsonl"),
    )
    # a reply forged by another tenant on the job's reply topic, before the real ones: not
    # taken as line 1's answer
    forged = Reply(
        request_id=f"{job.id}-1",
        tenant="evil",
        model="all-MiniLM-L6-v2",
        result=EmbeddingResult(embedding=[0.0] * 384, token_count=1),
    )
    topic = reply_topic(settings.topic_prefix, job.id)
    writer = open_transport(settings).writer(10)
    open_transport(settings).ensure_topics([topic], partitions=1)
    writer.send(topic, forged.model_dump_json().encode(), key=forged.request_id.encode())
    writer.flush()
    writer.close()
    seen: list[int] = []
    lines_before = {o: lines_counted(o) for o in ("completed", "failed")}
    done = JobRunner(
        store, job.id, settings, on_progress=lambda j, c: seen.append(c.completed)
    ).run()

    assert done.state is JobStatus.completed, done.errors
    assert (done.total, done.completed, done.failed) == (45, 40, 5)
    counted = {o: lines_counted(o) - lines_before[o] for o in lines_before}
    assert counted == {"completed": 40, "failed": 5}
    assert done.completed_at is not None and seen and seen[-1] == 40
    outputs = [json.loads(x) for x in read_lines(f"s3://{bucket}/out.jsonl.zst", settings)]
    assert sorted(o["custom_id"] for o in outputs) == sorted(f"c{i}" for i in range(40))
    for o in outputs:
        assert list(o) == ["id", "custom_id", "response", "error"] and o["error"] is None
        assert o["response"]["status_code"] == 200
        assert o["response"]["request_id"] == f"{job.id}-{int(o['custom_id'][1:]) + 1}"
        body = o["response"]["body"]
        assert len(body["data"][0]["embedding"]) == 384 and body["usage"]["prompt_tokens"] > 0
    [first] = [o for o in outputs if o["custom_id"] == "c0"]
    assert any(first["response"]["body"]["data"][0]["embedding"])  # the real one, not forged
    errors = {
        e["id"].rsplit("-", 1)[1]: e
        for e in map(json.loads, (tmp_path / "errors.jsonl").read_text().splitlines())
    }
    assert set(errors) == {"41", "42", "43", "44", "45"}
    assert (
        errors["41"]["error"]["code"] == "invalid_line"
        and "line 41" in errors["41"]["error"]["message"]
    )
    assert errors["42"]["custom_id"] == "empty" and errors["43"]["custom_id"] == "chat"
    assert errors["44"]["response"]["status_code"] == 400
    assert errors["44"]["response"]["body"]["error"]["code"] == "input_too_long"
    assert errors["45"]["response"]["status_code"] == 404


def test_resume_after_the_runner_is_killed(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path
) -> None:
    settings = job_settings(shared_prefix, tmp_path)
    source = tmp_path / "plain.txt"
    count = 600
    source.write_text("\n".join(f"plain line {i} of a long file" for i in range(count)) + "\n")
    store = JobStore(settings.sql_url)
    job = new_job(store, settings, str(source), input_format="plain")
    env = runner_env(settings)
    cli = [sys.executable, "-m", "headrace.ops.cli", "batch"]
    runner = subprocess.Popen([*cli, "run", job.id, "--window", "20"], env=env)

    def going() -> bool:
        if runner.poll() is not None:
            raise RuntimeError("the runner ended before it could be killed")
        return store.get(job.id).completed >= 100

    eventually(going, 120, "the runner's first 100 lines", every_s=0.05)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    killed = store.get(job.id)
    assert killed.state is JobStatus.in_progress and killed.completed < count

    # the dead runner still holds the lease: a plain resume refuses, --take-over takes it
    held = subprocess.run([*cli, "resume", job.id], env=env, capture_output=True, text=True)
    assert held.returncode == 1 and "--take-over" in held.stdout, held.stdout + held.stderr
    resume = [*cli, "resume", job.id, "--wait", "--take-over"]
    subprocess.run(resume, env=env, check=True, timeout=240)
    done = store.get(job.id)
    assert done.state is JobStatus.completed, done.errors
    assert (done.total, done.completed, done.failed) == (count, count, 0)
    answered = answered_lines(Path(done.spool_dir))
    assert set(answered) == {f"line-{n}" for n in range(1, count + 1)}
    assert max(answered.values()) == 1  # nothing answered twice across the kill


def test_cancel_mid_run(shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path) -> None:
    settings = job_settings(shared_prefix, tmp_path)
    source = tmp_path / "plain.txt"
    count = 3000
    source.write_text("\n".join(f"to be cancelled {i}" for i in range(count)) + "\n")
    store = JobStore(settings.sql_url)
    job = new_job(store, settings, str(source), input_format="plain")
    result: list[object] = []
    thread = threading.Thread(
        target=lambda: result.append(
            JobRunner(
                store, job.id, settings, RunOptions.of(settings, window=20, cancel_wait_s=20)
            ).run()
        )
    )
    thread.start()
    eventually(lambda: store.get(job.id).completed >= 50, 120, "50 lines done", every_s=0.05)
    subprocess.run(
        [sys.executable, "-m", "headrace.ops.cli", "batch", "cancel", job.id],
        env={**os.environ, "HEADRACE_SQL_URL": settings.sql_url},
        check=True,
    )
    thread.join(timeout=120)
    done = store.get(job.id)
    assert done.state is JobStatus.cancelled and done.cancelled_at is not None
    assert 50 <= done.completed + done.failed < count
    answered = answered_lines(Path(done.spool_dir))
    assert max(answered.values()) == 1 and sum(answered.values()) == done.completed + done.failed


def test_a_cancel_while_finalizing_ends_cancelled_with_the_output(
    shared_pipeline: Pipeline,
    shared_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = job_settings(shared_prefix, tmp_path)
    source = tmp_path / "plain.txt"
    source.write_text("\n".join(f"finalizing {i}" for i in range(5)) + "\n")
    store = JobStore(settings.sql_url)
    out = tmp_path / "out.jsonl"
    job = new_job(store, settings, str(source), input_format="plain", output_location=str(out))
    seen: list[JobStatus] = []
    real_deliver = finish_module.deliver

    def cancel_then_deliver(spool: Path, location: str, s: Settings) -> None:
        seen.append(store.get(job.id).state)
        if len(seen) == 1:  # the cancel lands while the output is being delivered
            store.move(job.id, JobStatus.cancelling)
        real_deliver(spool, location, s)

    monkeypatch.setattr(finish_module, "deliver", cancel_then_deliver)
    done = JobRunner(store, job.id, settings).run()
    assert seen[0] is JobStatus.finalizing
    assert done.state is JobStatus.cancelled and done.cancelled_at is not None
    assert done.output_file_id is not None
    assert len(out.read_text().splitlines()) == 5  # every answered line is in its output
