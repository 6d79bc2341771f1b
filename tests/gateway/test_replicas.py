"""Two gateway replicas over one store and one shared folder, as infra/k8s runs them (a
ReadWriteMany volume for files and spools, PostgreSQL for the rest): a file uploaded
through one is read and run through the other, and when the replica whose runner pool
carries the job is killed with SIGKILL mid-job, the other's pool takes the job over and
finishes it, every line answered once."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from headrace.jobs.store import JobStore
from headrace.ops.processes import Pipeline
from tests.eventually import eventually
from tests.gateway.gateway_proc import auth, finished, running_gateway
from tests.sql_stores import postgres_database

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
LINES = 1500
LEASE_S = 4.0


def batch_input(count: int) -> bytes:
    return "".join(
        json.dumps(
            {
                "custom_id": f"line-{i}",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": "all-MiniLM-L6-v2", "input": f"replica text {i} of the mill"},
            }
        )
        + "\n"
        for i in range(count)
    ).encode()


def test_files_and_jobs_are_shared_by_replicas_and_one_killed_mid_job_loses_nothing(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path
) -> None:
    with contextlib.ExitStack() as stack:
        sql_url = stack.enter_context(postgres_database())
        env = {
            "HEADRACE_TOPIC_PREFIX": shared_prefix,
            "HEADRACE_SQL_URL": sql_url,
            "HEADRACE_SHARED_STATE_DIR": str(tmp_path / "shared"),
            "HEADRACE_JOB_LEASE_S": str(LEASE_S),
            "HEADRACE_JOB_POLL_S": "0.5",
        }
        procs: list[subprocess.Popen[bytes]] = []
        url_a, keys = stack.enter_context(
            running_gateway(
                {**env, "HEADRACE_STATE_DIR": str(tmp_path / "a")},
                tmp_path,
                ("acme",),
                procs,
                name="a",
            )
        )
        url_b, _ = stack.enter_context(
            running_gateway(
                {**env, "HEADRACE_STATE_DIR": str(tmp_path / "b")},
                tmp_path,
                ("acme",),
                procs,
                name="b",
                keys=keys,
            )
        )
        acme = auth(keys["acme"])
        a = stack.enter_context(httpx.Client(base_url=url_a, headers=acme, timeout=30))
        b = stack.enter_context(httpx.Client(base_url=url_b, headers=acme, timeout=30))

        content = batch_input(LINES)
        uploaded = a.post(
            "/v1/files", files={"file": ("lines.jsonl", content)}, data={"purpose": "batch"}
        )
        assert uploaded.status_code == 200, uploaded.text
        file_id = uploaded.json()["id"]
        assert b.get(f"/v1/files/{file_id}").json()["bytes"] == len(content)
        assert b.get(f"/v1/files/{file_id}/content").content == content  # read through b

        created = b.post(
            "/v1/batches",
            json={
                "input_file_id": file_id,
                "endpoint": "/v1/embeddings",
                "completion_window": "24h",
            },
        )
        assert created.status_code == 200, created.text
        batch_id = created.json()["id"]

        store = JobStore(sql_url)
        job_id = batch_id  # the batch is the job
        eventually(
            lambda: store.get(job_id).completed >= LINES // 10,
            120,
            "a tenth of the lines answered",
            every_s=0.05,
        )
        owner = store.get(job_id).lease_owner
        assert owner is not None
        pid = int(owner.split("-")[-2])  # host-pid-random (jobs.lease.runner_id)
        [carrier] = [p for p in procs if p.pid == pid]
        survivor = b if carrier is procs[0] else a
        os.kill(carrier.pid, signal.SIGKILL)
        carrier.wait()
        at_kill = store.get(job_id)
        assert at_kill.completed < LINES, "the job finished before the kill: no fault landed"
        print(f"killed gateway {'a' if carrier is procs[0] else 'b'} at {at_kill.completed} lines")

        batch = eventually(
            lambda: finished(survivor.get(f"/v1/batches/{batch_id}").json()),
            240,
            "the batch finished by the surviving replica",
            every_s=0.5,
        )
        assert batch["status"] == "completed", batch
        assert batch["request_counts"] == {"total": LINES, "completed": LINES, "failed": 0}
        assert store.get(job_id).lease_owner != owner  # taken over
        out = survivor.get(f"/v1/files/{batch['output_file_id']}/content").text.splitlines()
        ids = [json.loads(line)["custom_id"] for line in out]
        assert len(ids) == LINES and set(ids) == {f"line-{i}" for i in range(LINES)}
