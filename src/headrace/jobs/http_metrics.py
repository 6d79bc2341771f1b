"""The gateway's own series: requests by route, method and status, and their latency.

Routes are labelled by their template (``/v1/files/{file_id}``), never by the path a caller
sent, so the label set stays bounded; paths that match no route count as ``unmatched``.
Scrapes and probes (``/metrics``, ``/healthz``, ``/readyz``) are not counted."""

from __future__ import annotations

import time

from prometheus_client import Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
NOT_COUNTED = frozenset({"/metrics", "/healthz", "/readyz"})


class MetricsMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in NOT_COUNTED:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # a route that raised before answering

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                LATENCY.labels(_route(scope)).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, observed)
        finally:
            REQUESTS.labels(_route(scope), scope.get("method", "?"), str(status)).inc()


def _route(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"
