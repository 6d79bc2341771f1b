"""Cost per request end to end: replies computed by the real pipeline carry their share of
device time, the worker counts each tenant's usage, and `headrace cost report` prints it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from headrace.config.settings import Settings
from headrace.ops.processes import Pipeline
from headrace.producers.client import Client

pytestmark = pytest.mark.timeout(180)


def test_cost_report_shows_what_the_pipeline_computed_for_a_tenant(
    shared_pipeline: Pipeline, shared_settings: Settings, shared_prefix: str, tmp_path: Path
) -> None:
    tenant = f"cost-{uuid.uuid4().hex[:6]}"
    texts = [f"what does sentence {i} cost to embed?" for i in range(20)]
    with Client(shared_settings, tenant=tenant) as client:
        replies = [s.result(60) for s in client.submit_many(texts)]
    costs = [r.cost for r in replies]
    assert all(c is not None and c.device_ms > 0 for c in costs)
    env = {
        **os.environ,
        "HEADRACE_TOPIC_PREFIX": shared_prefix,
        "HEADRACE_SQL_URL": f"sqlite:///{tmp_path}/usage.db",
    }
    cli = [sys.executable, "-m", "headrace.ops.cli", "cost", "report", "--tenant", tenant]
    out = subprocess.run([*cli, "--json"], env=env, capture_output=True, text=True, check=True)
    [row] = [json.loads(line) for line in out.stdout.splitlines()]
    assert (row["tenant"], row["requests"]) == (tenant, 20)
    assert row["tokens"] == sum(c.tokens for c in costs if c is not None)
    device_s = sum(c.device_ms for c in costs if c is not None) / 1000
    assert row["device_seconds"] == pytest.approx(device_s, rel=1e-3)
    table = subprocess.run(cli, env=env, capture_output=True, text=True, check=True).stdout
    assert tenant in table and "device-s" in table
    bad = subprocess.run([*cli, "--since", "soon"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and "a duration" in bad.stderr
