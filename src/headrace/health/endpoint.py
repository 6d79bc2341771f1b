"""``/metrics``, ``/healthz`` and ``/readyz`` of a long-running process, on a port of its own
(a daemon thread; the gateway serves the same three on its HTTP port instead).

- ``/metrics``: every Prometheus series this process registered (text format).
- ``/healthz``: 200 while the process runs (liveness).
- ``/readyz``: 503 until the process said it is ready (``announce_ready``: a worker after
  warm-up, a dispatcher once it holds partitions), 200 after.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

_ready = threading.Event()


def mark_ready() -> None:
    _ready.set()


def is_ready() -> bool:
    return _ready.is_set()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._send(200, b"ok\n")
        elif path == "/readyz":
            ready = is_ready()
            self._send(200 if ready else 503, b"ready\n" if ready else b"starting\n")
        else:
            self._send(404, b"not found: /metrics, /healthz, /readyz\n")

    def _send(self, status: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:  # scrapes every few seconds: not worth a line
        pass


class HealthServer:
    def __init__(self, port: int, host: str = "0.0.0.0") -> None:
        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="health-endpoint", daemon=True
        )

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def serve_health(port: int | None) -> HealthServer | None:
    """Start the endpoint on ``port`` (None: none; 0: any free port)."""
    return HealthServer(port).start() if port is not None else None
