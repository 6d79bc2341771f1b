"""What watching the pipeline costs, measured in one run:

- scrape cost: each process's ``/metrics`` (dispatcher, workers, invalidator) after real
  traffic, scraped ``scrapes`` times in a row: ms per scrape and bytes;
- overhead: the pipeline bench's embedding run (bench/pipeline.py) plain, against the same
  with every process scraped each second and tracing on (the OpenTelemetry SDK recording
  every span, exported over OTLP/HTTP to a local sink), rounds interleaved; the ratio of
  useful tokens/s and of lone-request latency.

    python -m bench.observability [--count 600] [--rounds 2]   (needs the [tracing] extra)
"""

from __future__ import annotations

import http.server
import os
import statistics
import threading
import time
import urllib.request
import uuid
from collections.abc import Sequence

import typer
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, SamplingResult
from rich.console import Console
from rich.table import Table

from bench.pipeline import run_pipeline
from bench.stats import pct
from headrace.config.settings import Settings
from headrace.ops.localstack import LocalStack
from headrace.ops.processes import Proc, free_port, local_pipeline
from headrace.ops.sample_texts import long_tail_texts
from headrace.producers.client import Client

console = Console(width=120)


class _Sink(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that takes every export and keeps nothing."""

    received = 0

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(length)
        _Sink.received += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


class Toggle(Sampler):
    """This process's spans recorded or not, switched between rounds."""

    on = False

    def should_sample(self, *args: object, **kwargs: object) -> SamplingResult:
        return (ALWAYS_ON if self.on else ALWAYS_OFF).should_sample(*args, **kwargs)  # type: ignore[arg-type]

    def get_description(self) -> str:
        return "toggle"


def scrape_cost(targets: Sequence[tuple[str, str]], scrapes: int) -> list[tuple[str, float, int]]:
    """(process, median ms per scrape, bytes) of each (process, url)."""
    out = []
    for name, url in targets:
        sizes, times = [], []
        for _ in range(scrapes):
            began = time.perf_counter()
            with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
                sizes.append(len(answer.read()))
            times.append((time.perf_counter() - began) * 1000)
        out.append((name, statistics.median(times), sizes[-1]))
    return out


def main(count: int = 600, rounds: int = 2, lone: int = 40, scrapes: int = 200) -> None:
    settings = Settings()
    stack = LocalStack(settings)
    started = not stack.is_up()
    if started:
        stack.up()
    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    toggle = Toggle()
    provider = TracerProvider(sampler=toggle)
    endpoint = f"http://127.0.0.1:{sink.server_address[1]}"
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        raise SystemExit("needs the tracing extra: pip install 'headrace[tracing]'") from exc
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{endpoint}/v1/traces")))
    trace.set_tracer_provider(provider)
    texts = long_tail_texts(count, seed=7)
    try:
        costs = _scrape_costs(settings, texts, scrapes)
        plain: list[tuple[float, float]] = []
        watched: list[tuple[float, float]] = []
        for r in range(rounds):
            for on in (False, True):
                env = {"HEADRACE_TOPIC_PREFIX": f"bench-obs-{uuid.uuid4().hex[:6]}"}
                if on:
                    env |= {
                        "HEADRACE_TRACING_EXPORTER": "otlp",
                        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{endpoint}/v1/traces",
                    }
                else:
                    env |= {"HEADRACE_TRACING_EXPORTER": "none"}
                toggle.on = on
                result, legs = run_pipeline(
                    texts, env, {}, lone=lone, scrape_every_s=1.0 if on else None
                )
                p50 = pct(legs.overhead_ms, 0.5)
                (watched if on else plain).append((result.tokens_per_s, p50))
                console.print(
                    f"round {r + 1} {'metrics scraped + tracing' if on else 'plain':<26} "
                    f"{result.tokens_per_s:,.0f} tokens/s, lone latency - compute p50 {p50:.1f} ms"
                )
        provider.force_flush()
    finally:
        sink.shutdown()
        if started:
            stack.down()
    table = Table("process", "ms per scrape (median)", "bytes")
    for name, ms, size in costs:
        table.add_row(name, f"{ms:.2f}", f"{size:,}")
    console.print(table)
    tps = statistics.median(w[0] for w in watched) / statistics.median(p[0] for p in plain)
    lat = statistics.median(w[1] for w in watched) / statistics.median(p[1] for p in plain)
    console.print(
        f"watched / plain, medians of {rounds} rounds: tokens/s {tps:.3f}, lone latency "
        f"- compute p50 {lat:.3f}; OTLP exports received by the sink: {_Sink.received}"
    )


def _scrape_costs(
    settings: Settings, texts: list[str], scrapes: int
) -> list[tuple[str, float, int]]:
    env = {"HEADRACE_TOPIC_PREFIX": f"bench-scrape-{uuid.uuid4().hex[:6]}"}
    os.environ.update(env)
    port = free_port()
    invalidator = Proc(
        "invalidator",
        ["invalidator", "--metrics-port", str(port)],
        {**os.environ},
        settings.state_dir / "logs",
    )
    with (
        local_pipeline(env, settings.device, settings.torch_threads, metrics=True) as pipeline,
        Client(Settings(), tenant="bench") as client,
    ):
        invalidator.start()
        try:
            client.embed(texts)  # every series has its labels
            names = [p.name for p in [*pipeline.dispatchers, *pipeline.workers]]
            targets = [*zip(names, pipeline.metrics_urls, strict=True)]
            return scrape_cost([*targets, ("invalidator", f"http://127.0.0.1:{port}")], scrapes)
        finally:
            invalidator.stop()


if __name__ == "__main__":
    typer.run(main)
