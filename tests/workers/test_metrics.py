"""A worker's series: counted from the replies of a batch (no service), and served by a real
worker process with --metrics-port after real traffic."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import REGISTRY

from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Proc
from headrace.producers.client import Client
from headrace.schemas.errors import ErrorCode, ErrorInfo
from headrace.schemas.messages import (
    BatchInfo,
    BatchItem,
    EmbeddingResult,
    RecordRef,
    Reply,
    Request,
    Timings,
)
from headrace.schemas.params import GenerateParams
from headrace.workers import metrics
from headrace.workers.backends.decode_graphs import StepGraphs
from tests.conftest import pipeline_env, unique_prefix
from tests.eventually import eventually
from tests.gateway.gateway_proc import free_port
from tests.tiny_model import load_test_lm

pytestmark = pytest.mark.timeout(180)


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_batch_s_replies_are_counted_with_their_times() -> None:
    created = datetime.fromtimestamp(1_800_000_000, UTC)
    info = BatchInfo(batch_id="b1", bucket=999, size=2, real_tokens=10, padded_tokens=12)
    timings = Timings(queued_ms=20, batch_wait_ms=30, compute_ms=400, to_worker_ms=7)
    replies = []
    for i, error in enumerate([None, ErrorInfo(code=ErrorCode.model_error, message="boom")]):
        request = Request(
            request_id=f"r{i}", tenant="t", model="m", input="x", reply_to="r", created_at=created
        )
        item = BatchItem(
            request=request, ref=RecordRef(topic="t", partition=0, offset=i), arrived_at=0
        )
        result = EmbeddingResult(embedding=[0.0], token_count=3) if error is None else None
        reply = Reply(
            request_id=request.request_id,
            tenant="t",
            model="m",
            result=result,
            error=error,
            timings=timings if error is None else None,
            batch=info if error is None else None,
        )
        replies.append((item, reply))
    before = value("headrace_request_seconds_count", bucket="999")
    metrics.observe(999, replies, now=1_800_000_001.5)
    assert value("headrace_worker_batches_total", bucket="999") == 1
    assert value("headrace_worker_replies_total", bucket="999", outcome="ok") == 1
    assert value("headrace_worker_replies_total", bucket="999", outcome="model_error") == 1
    assert value("headrace_request_seconds_count", bucket="999") == before + 2
    assert value("headrace_request_seconds_sum", bucket="999") == pytest.approx(3.0)
    assert value("headrace_batch_compute_seconds_sum", bucket="999") == pytest.approx(0.4)
    assert value("headrace_request_queued_seconds_sum", bucket="999") == pytest.approx(0.02)
    assert value("headrace_request_to_worker_seconds_sum", bucket="999") == pytest.approx(0.007)


def _unrecordable(step: Callable[[], Any]) -> Any:
    raise RuntimeError("operation not permitted when stream is capturing")


def test_a_decode_loop_s_gauges_follow_it_and_say_when_graphs_fail() -> None:
    backend = load_test_lm(continuous_rows=8, slots=True)
    try:
        graphs = StepGraphs(_unrecordable)
        assert backend.slot_batch is not None
        backend.slot_batch.runner = graphs.run
        backend.graphs = graphs
        metrics.watch_decoder(backend)
        assert value("headrace_worker_decode", what="graphs_failed") == 0
        items = backend.encode(["the water runs", "to the mill"], [False, False])
        out = backend.generate(items, [GenerateParams(max_tokens=6)] * 2)
        assert value("headrace_worker_decode", what="steps") >= 4
        tokens = sum(g.completion_tokens for g in out)
        assert value("headrace_worker_decode", what="tokens") == tokens
        assert value("headrace_worker_decode", what="most_rows") == 2
        assert value("headrace_worker_decode", what="graphs_failed") == 1
        assert value("headrace_worker_decode", what="graphs_captured") == 0
    finally:
        backend.close()


def test_a_running_worker_serves_its_series(stack: LocalStack, tmp_path: Path) -> None:
    prefix = unique_prefix("wmetrics")
    env = {**pipeline_env(prefix), "PYTHONUNBUFFERED": "1"}
    port = free_port()
    worker = Proc("worker", ["worker", "--metrics-port", str(port)], env, tmp_path).start()
    dispatcher = Proc("dispatcher", ["dispatcher"], env, tmp_path).start()
    try:
        with Client(Settings(topic_prefix=prefix), tenant="metrics") as client:
            vectors = client.embed([f"metrics text {i}" for i in range(20)])
        assert len(vectors) == 20

        def replies_counted() -> str:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
            assert "headrace_worker_replies_total{" in text, text[-1000:]
            return text

        text = eventually(replies_counted, 10, "the worker's replies counted", every_s=0.1)
        samples = {
            line.split(" ")[0]: float(line.split(" ")[1])
            for line in text.splitlines()
            if line.startswith("headrace_") and " " in line
        }
        ok = sum(
            v
            for k, v in samples.items()
            if k.startswith("headrace_worker_replies_total{") and 'outcome="ok"' in k
        )
        assert ok == 20
        assert samples['headrace_worker_load_stage_seconds{stage="weights"}'] > 0
        assert 0 < samples["headrace_worker_memory_used_ratio"] < 1
        assert samples['headrace_worker_memory_bytes{kind="rss"}'] > 50e6
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").status_code == 200
    finally:
        dispatcher.stop()
        worker.stop()
