"""Tracing through the pipeline with the OpenTelemetry SDK's in-memory exporter.

In this process: the SDK client, a real dispatcher (its shell and core, on tansu and Redis)
and the worker's batch runner with the model; the Celery leg is the batch's JSON, as the
task carries it. Each request is one trace: ``headrace.submit`` with its ``queued``,
``batch_wait``, ``compute`` and ``reply`` spans as children, the compute span linked to its
``headrace.batch`` span, which links back to every request it computed. The reply records
carry the request's ``traceparent``."""

from __future__ import annotations

import collections
import itertools
import json
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from headrace import connections
from headrace.config.settings import Settings
from headrace.health.tracing import TRACEPARENT, valid_traceparent
from headrace.ops.localstack import LocalStack
from headrace.producers.client import Client
from headrace.schemas.messages import Batch
from headrace.transport import open_transport
from headrace.usage.meter import UsageMeter
from headrace.workers.backends import EmbeddingBackend
from headrace.workers.batch_context import BatchContext
from headrace.workers.batch_runner import run_batch
from headrace.workers.delivery_hooks import after_delivery
from headrace.workers.dispatcher.io.shell import Dispatcher
from headrace.workers.ledger import RedisLedger
from headrace.workers.reply_sink import TopicReplySink
from headrace.workers.version_stats import VersionStats
from tests.integration.topics import read_topic
from tests.models.loaded import loaded_minilm

pytestmark = pytest.mark.timeout(240)
LEGS = ("headrace.queued", "headrace.batch_wait", "headrace.compute", "headrace.reply")


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # the first SDK in this process
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.clear()


@pytest.fixture(scope="module")
def model() -> EmbeddingBackend:
    return loaded_minilm()


def test_one_trace_per_request_with_its_legs_linked_to_its_batch(
    stack: LocalStack, spans: InMemorySpanExporter, model: EmbeddingBackend
) -> None:
    prefix = f"t-trace-{uuid.uuid4().hex[:8]}"
    settings = Settings(topic_prefix=prefix, max_batch_tokens=64)  # several batches
    redis = connections.redis_client(settings)
    ledger = RedisLedger(redis, prefix, 600)
    beating = threading.Event()  # the worker beats as a live one does (every 2 s): beating
    # once, it is dead to the dispatcher 6 s in, and the test ran 11 s in a CI rehearsal

    def beat() -> None:
        while True:
            ledger.heartbeat("w-trace", list(settings.buckets))
            if beating.wait(settings.worker_heartbeat_s):
                return

    threading.Thread(target=beat, daemon=True).start()
    ctx = BatchContext(
        backend=model,
        ledger=ledger,
        sink=TopicReplySink(open_transport(settings), settings),
        worker_id="w-trace",
        after_delivery=after_delivery(
            UsageMeter(redis, prefix), VersionStats(redis, prefix, settings.model), "test"
        ),
    )
    worker = ThreadPoolExecutor(max_workers=1)
    sent: list[Batch] = []

    def send_batch(batch: Batch, queue: str) -> None:
        task = Batch.model_validate(json.loads(batch.model_dump_json()))  # Celery's JSON
        sent.append(task)
        worker.submit(run_batch, task, ctx)

    dispatcher = Dispatcher(settings, send_batch=send_batch)
    stop = threading.Event()
    loop = threading.Thread(target=dispatcher.run, args=(stop,), daemon=True)
    loop.start()
    texts = [f"trace me, sentence {i} " + "word " * (i % 5) for i in range(12)]
    try:
        with Client(settings, tenant="tracer") as client:
            replies = [s.result(90) for s in client.submit_many(texts)]
    finally:
        stop.set()
        beating.set()
        loop.join(20)
        worker.shutdown(wait=True)
    assert all(r.result is not None for r in replies), [r.error for r in replies if r.error]
    assert len(sent) >= 2  # several batches: the links must point to the right one

    finished: list[ReadableSpan] = list(spans.get_finished_spans())
    by_trace: dict[int, list[ReadableSpan]] = collections.defaultdict(list)
    for span in finished:
        assert span.context is not None
        by_trace[span.context.trace_id].append(span)
    batches = {
        s.attributes["headrace.batch_id"]: s
        for s in finished
        if s.name == "headrace.batch" and s.attributes is not None
    }
    submits = [s for s in finished if s.name == "headrace.submit"]
    mine = [s for s in submits if s.attributes and s.attributes["headrace.tenant"] == "tracer"]
    assert len(mine) == len(texts)
    for submit in mine:
        assert submit.context is not None and submit.parent is None  # the trace's root
        trace_spans = by_trace[submit.context.trace_id]
        names = collections.Counter(s.name for s in trace_spans)
        assert names == collections.Counter(["headrace.submit", *LEGS]), names
        legs = {s.name: s for s in trace_spans if s.name in LEGS}
        for leg in legs.values():
            assert leg.parent is not None and leg.parent.span_id == submit.context.span_id
        order = [legs[n] for n in LEGS]
        for earlier, later in itertools.pairwise(order):
            assert earlier.end_time is not None and later.start_time is not None
            assert earlier.end_time <= later.start_time + 1_000_000  # 1 ms of rounding
        compute = legs["headrace.compute"]
        assert compute.attributes is not None
        batch = batches[compute.attributes["headrace.batch_id"]]
        assert batch.context is not None
        assert [link.context.span_id for link in compute.links] == [batch.context.span_id]
        linked = {link.context.trace_id for link in batch.links}
        assert submit.context.trace_id in linked
        assert batch.context.trace_id not in {s.context.trace_id for s in mine}  # type: ignore[union-attr]
    assert sum(len(b.links) for b in batches.values()) == len(texts)

    # the reply records carry each request's trace context
    wanted = {s.context.trace_id for s in mine if s.context is not None}
    carried = set()
    for record in read_topic(settings, client.reply_topic):
        traceparent = valid_traceparent(record.header(TRACEPARENT))
        assert traceparent is not None, record
        carried.add(int(traceparent.split("-")[1], 16))
    assert carried == wanted


def test_a_record_with_a_forged_traceparent_is_traced_by_nothing() -> None:
    for forged in (b"00-zz-1-01", b"not a header", b"00-" + b"0" * 100):
        assert valid_traceparent(forged) is None
    good = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    assert valid_traceparent(good.encode()) == good
