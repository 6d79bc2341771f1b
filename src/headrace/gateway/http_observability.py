"""What the gateway says about its own requests: Prometheus series and a trace span.

- ``headrace_gateway_requests_total{route, method, status}`` and
  ``headrace_gateway_request_seconds{route}``: routes by their template
  (``/v1/files/{file_id}``), never by the path a caller sent, so the label set stays bounded;
  paths that match no route count as ``unmatched``;
- a ``headrace.gateway`` server span, current while the route runs, whose parent is the
  caller's ``traceparent`` header (W3C): the requests the route submits join the caller's
  trace (with no SDK configured the caller's context still travels on to the records).

Scrapes and probes (``/metrics``, ``/healthz``, ``/readyz``) are neither counted nor traced.
"""

from __future__ import annotations

import time

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind
from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from headrace.health.tracing import TRACEPARENT, context_of, tracer, valid_traceparent

REQUESTS = Counter(
    "headrace_gateway_requests_total",
    "HTTP requests answered, by route template, method and status",
    ["route", "method", "status"],
)
LATENCY = Histogram(
    "headrace_gateway_request_seconds",
    "HTTP request -> its response started, by route template",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
NOT_OBSERVED = frozenset({"/metrics", "/healthz", "/readyz"})


METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in NOT_OBSERVED:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # a route that raised before answering
        method = scope.get("method", "?")
        if method not in METHODS:
            method = "other"  # a label value per made-up method would grow without bound

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                LATENCY.labels(_route(scope)).observe(time.perf_counter() - started)
            await send(message)

        given = dict(scope["headers"]).get(TRACEPARENT.encode())
        parent = context_of(valid_traceparent(given))
        token = otel_context.attach(parent) if parent is not None else None
        try:
            name = f"headrace.gateway {method} {scope.get('path', '')}"
            with tracer().start_as_current_span(name, kind=SpanKind.SERVER) as span:
                await self.app(scope, receive, observed)
                if span.is_recording():
                    span.update_name(f"headrace.gateway {method} {_route(scope)}")
                    span.set_attribute("http.response.status_code", status)
        finally:
            if token is not None:
                otel_context.detach(token)
            REQUESTS.labels(_route(scope), method, str(status)).inc()


def _route(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
