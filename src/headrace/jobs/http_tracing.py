"""The gateway's side of tracing: a request's ``traceparent`` header (W3C) becomes the parent
of a ``headrace.gateway`` server span, current while the route runs, so the requests the
route submits join the caller's trace (and with no SDK configured, the caller's context still
travels on to the Kafka records)."""

from __future__ import annotations

from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind
from starlette.types import ASGIApp, Receive, Scope, Send

from headrace.health.tracing import TRACEPARENT, context_of, tracer, valid_traceparent
from headrace.jobs.http_metrics import NOT_COUNTED


class TraceContextMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in NOT_COUNTED:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(TRACEPARENT.encode())
        parent = context_of(valid_traceparent(given))
        token = otel_context.attach(parent) if parent is not None else None
        try:
            name = f"headrace.gateway {scope.get('method', '?')} {scope.get('path', '')}"
            with tracer().start_as_current_span(name, kind=SpanKind.SERVER) as span:
                await self.app(scope, receive, send)
                route = getattr(scope.get("route"), "path", None)
                if isinstance(route, str) and span.is_recording():
                    span.update_name(f"headrace.gateway {scope.get('method', '?')} {route}")
        finally:
            if token is not None:
                otel_context.detach(token)
