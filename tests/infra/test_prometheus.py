"""A real Prometheus (Debian's 2.42) scrapes a running dispatcher and worker; after real
traffic, PromQL over its HTTP API returns the expected series with sensible values, and it
has loaded the alert rules."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Proc
from headrace.producers.client import Client
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.gateway.gateway_proc import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

RULES = Path(__file__).resolve().parents[2] / "infra" / "prometheus" / "alerts.yml"
REQUESTS = 30


def query(base: str, promql: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


def scalar(base: str, promql: str) -> float | None:
    result = query(base, promql)
    return float(result[0]["value"][1]) if result else None


def test_prometheus_scrapes_the_pipeline(stack: LocalStack, tmp_path: Path) -> None:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no prometheus here (apt-get install prometheus)")
    prefix = unique_prefix("prom")
    env = pipeline_env(prefix)
    ports = {"dispatcher": free_port(), "worker": free_port()}
    procs = [
        Proc(name, [name, "--metrics-port", str(port)], env, tmp_path).start()
        for name, port in ports.items()
    ]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": f"headrace-{name}", "static_configs": [{"targets": [f"127.0.0.1:{p}"]}]}
            for name, p in ports.items()
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    web = free_port()
    base = f"http://127.0.0.1:{web}"
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=log,
        stderr=log,
    )
    try:
        with Client(Settings(topic_prefix=prefix), tenant="prom") as client:
            texts = [f"scraped text {i} " + "word " * (i % 30) for i in range(REQUESTS)]
            assert len(client.embed(texts)) == REQUESTS
        ok = 'sum(headrace_worker_replies_total{outcome="ok"})'

        def scraped() -> bool:
            if prometheus.poll() is not None:
                raise RuntimeError((tmp_path / "prometheus.log").read_text()[-2000:])
            assert scalar(base, ok) == REQUESTS, f"{ok} = {scalar(base, ok)}"
            return True

        eventually(scraped, 60, "every reply counted in Prometheus", every_s=0.5)
        both = {"headrace-dispatcher": "1", "headrace-worker": "1"}

        def up() -> bool:  # each target is scraped within seconds
            found = {r["metric"]["job"]: r["value"][1] for r in query(base, "up")}
            assert found == both, found
            return True

        eventually(up, 20, "both targets up", every_s=0.5)
        since_start = "histogram_quantile(0.99, sum by (le) (headrace_request_seconds_bucket))"
        p99 = scalar(base, since_start)
        assert p99 is not None and 0 < p99 < 60
        padding = [
            float(r["value"][1]) for r in query(base, "headrace_dispatcher_padding_efficiency > 0")
        ]
        assert padding and all(0 < p <= 1 for p in padding)
        batches = scalar(base, "sum(headrace_dispatcher_batches_total)")
        assert batches is not None and batches == scalar(base, "sum(headrace_worker_batches_total)")
        memory = scalar(base, "max(headrace_worker_memory_used_ratio)")
        assert memory is not None and 0 < memory < 1
        # the autoscaling signal, for every bucket; a worker's three load stages ended ok
        queued = query(base, "headrace_dispatcher_queued_work_seconds")
        assert len(queued) == 2 * len(Settings().buckets)  # online and bulk
        assert all(float(r["value"][1]) >= 0 for r in queued)
        assert scalar(base, 'sum(headrace_worker_load_stages_total{outcome="ok"})') == 3
        busy = scalar(base, "sum(headrace_batch_compute_seconds_sum)")
        assert busy is not None and busy > 0  # what the busy-workers trigger takes a rate of
        rules = httpx.get(f"{base}/api/v1/rules", timeout=10).json()["data"]["groups"]
        loaded = {r["name"]: r["health"] for g in rules for r in g["rules"]}
        assert set(loaded) == {
            "HeadraceSlowWhileMemoryFull",
            "HeadraceRequestsFailing",
            "HeadracePaddingWaste",
        }
        assert set(loaded.values()) <= {"ok", "unknown"}  # unknown: not evaluated yet
    finally:
        prometheus.terminate()
        prometheus.wait(10)
        log.close()
        for proc in procs:
            proc.stop()
