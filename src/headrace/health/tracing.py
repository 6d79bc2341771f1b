"""W3C trace context through the pipeline, on the OpenTelemetry API.

A request's trace starts where it is submitted: the SDK's ``headrace.submit`` span (a child
of the caller's current span, or of the gateway's incoming ``traceparent``) is put on the
request record as a ``traceparent`` Kafka header. The dispatcher carries it in the batch (the
Celery task's JSON), and the worker records the request's legs as spans of that trace
(``headrace.queued``, ``headrace.batch_wait``, ``headrace.compute``, ``headrace.reply``,
timed from the reply's timings) plus one ``headrace.batch`` span per batch, linked both ways
with the requests it computed; the reply record carries the ``traceparent`` back.

Only the API is a dependency: with no SDK configured every span is a no-op and only a
context given from outside travels. ``configure`` installs the SDK (the ``tracing`` extra)
with an OTLP exporter when ``tracing_exporter = "otlp"``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
_propagator = TraceContextTextMapPropagator()
Headers = tuple[tuple[str, bytes], ...]


def tracer() -> trace.Tracer:
    return trace.get_tracer("headrace")


def valid_traceparent(value: bytes | str | None) -> str | None:
    """``value`` if it is a W3C traceparent (anything else is dropped, never trusted)."""
    if value is None:
        return None
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    return text if _TRACEPARENT.fullmatch(text) else None


def context_of(traceparent: str | None) -> Context | None:
    """The remote context a traceparent names (None: none)."""
    if traceparent is None:
        return None
    return _propagator.extract({TRACEPARENT: traceparent})


def current_traceparent(context: Context | None = None) -> str | None:
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=context)
    return valid_traceparent(carrier.get(TRACEPARENT))


def headers_of(traceparent: str | None) -> Headers:
    return ((TRACEPARENT, traceparent.encode()),) if traceparent else ()


@contextmanager
def submitting(tenant: str, request_id: str, topic: str) -> Iterator[str | None]:
    """The ``headrace.submit`` span around producing a request; yields the traceparent to
    put on its record (None when there is no trace to follow)."""
    attributes = {
        "headrace.tenant": tenant,
        "headrace.request_id": request_id,
        "messaging.destination.name": topic,
        "messaging.system": "kafka",
    }
    with tracer().start_as_current_span(
        "headrace.submit", kind=SpanKind.PRODUCER, attributes=attributes
    ):
        yield current_traceparent()


def link_to(traceparent: str) -> Link | None:
    context = context_of(traceparent)
    if context is None:
        return None
    span_context = trace.get_current_span(context).get_span_context()
    return Link(span_context) if span_context.is_valid else None


def configure(exporter: str, service: str) -> bool:
    """Install the OpenTelemetry SDK for this process (``exporter``: "otlp", or "none" to
    leave the no-op API). Returns whether spans are now recorded."""
    if exporter == "none":
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("tracing_exporter=%s needs: pip install 'headrace[tracing]'", exporter)
        return False
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # OTEL_EXPORTER_OTLP_*
    trace.set_tracer_provider(provider)
    return True
