"""/metrics, /healthz and /readyz over real HTTP: in this process (the endpoint itself), and
from a running dispatcher and invalidator started with --metrics-port."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client import Counter

from headrace.health import endpoint
from headrace.health.endpoint import HealthServer, Readiness
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Proc
from tests.clock import FakeClock
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.gateway.gateway_proc import free_port

pytestmark = pytest.mark.timeout(120)

PROBE = Counter("headrace_test_endpoint_probes_total", "A series only this test registers")


def test_the_endpoint_serves_metrics_liveness_and_readiness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(endpoint, "_readiness", Readiness(clock, within_s=30))  # not ready yet
    server = HealthServer(0, host="127.0.0.1").start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert httpx.get(f"{base}/healthz").status_code == 200
        starting = httpx.get(f"{base}/readyz")
        assert (starting.status_code, starting.text) == (503, "starting\n")
        endpoint.mark_ready()
        assert httpx.get(f"{base}/readyz").status_code == 200
        endpoint.saw("redis", False, "ConnectionError('refused')")  # not a one-way latch
        unready = httpx.get(f"{base}/readyz")
        assert (unready.status_code, unready.text) == (503, "redis: ConnectionError('refused')\n")
        endpoint.saw("redis", True)
        endpoint.saw("loop", True)
        assert httpx.get(f"{base}/readyz").status_code == 200
        clock.now += 29
        endpoint.saw("redis", True)
        clock.now += 2  # the loop last turned 31 s ago: stuck
        stuck = httpx.get(f"{base}/readyz")
        assert (stuck.status_code, stuck.text) == (503, "loop: not seen for 31s\n")
        endpoint.saw("loop", True)
        assert httpx.get(f"{base}/readyz").status_code == 200
        PROBE.inc(3)
        metrics = httpx.get(f"{base}/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        assert "headrace_test_endpoint_probes_total 3.0" in metrics.text
        assert httpx.get(f"{base}/nothing").status_code == 404
    finally:
        server.stop()


def test_a_dispatcher_and_an_invalidator_serve_them(stack: LocalStack, tmp_path: Path) -> None:
    env = pipeline_env(unique_prefix("endpoint"))
    ports = {"dispatcher": free_port(), "invalidator": free_port()}
    procs = [
        Proc(name, [name, "--metrics-port", str(port)], env, tmp_path).start()
        for name, port in ports.items()
    ]
    try:
        for name, port in ports.items():
            base = f"http://127.0.0.1:{port}"
            eventually(  # READY said: ready
                lambda base=base: httpx.get(f"{base}/readyz").status_code == 200,
                10,
                f"{name} ready",
            )
            assert httpx.get(f"{base}/healthz").status_code == 200
            text = httpx.get(f"{base}/metrics").text
            series = {
                "dispatcher": "headrace_dispatcher_redispatched_batches_total",
                "invalidator": "headrace_sessions_archived_total",
            }[name]
            assert f"# TYPE {series} counter" in text, text[-800:]
        # the autoscaling signal is there for every bucket before any traffic
        signal = 'headrace_dispatcher_queued_work_seconds{bucket="512",lane="%s"} 0.0'

        def both_lanes() -> bool:
            text = httpx.get(f"http://127.0.0.1:{ports['dispatcher']}/metrics").text
            assert all(signal % lane in text for lane in ("online", "bulk")), text[-1500:]
            return True

        eventually(both_lanes, 10, "the scaling signal for both lanes", every_s=0.2)
    finally:
        for proc in procs:
            proc.stop()
