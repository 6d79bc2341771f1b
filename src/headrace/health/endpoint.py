"""``/metrics``, ``/healthz`` and ``/readyz`` of a long-running process, on a port of its own
(a daemon thread; the gateway serves the same three on its HTTP port instead).

- ``/metrics``: every Prometheus series this process registered (text format).
- ``/healthz``: 200 while the process runs (liveness).
- ``/readyz``: 200 while the process can do its job: it said it is ready (``announce_ready``:
  a worker after warm-up, a dispatcher once it holds partitions), and every condition it
  reports (``saw``: Redis answered, its loop turned) held when last reported, within
  ``READY_WITHIN_S``; otherwise 503, saying which condition failed. Not a one-way latch: a
  dispatcher whose Redis is away, or whose loop stopped, turns unready, and ready again
  once it recovers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

READY_WITHIN_S = 30.0  # a condition not reported for longer counts as failed


class Readiness:
    """Policy with an injected clock: ready once said, while every reported condition holds."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, within_s: float = READY_WITHIN_S
    ) -> None:
        self.clock = clock
        self.within_s = within_s
        self._lock = threading.Lock()
        self._said = False
        self._seen: dict[str, tuple[bool, float, str]] = {}

    def mark_ready(self) -> None:
        with self._lock:
            self._said = True

    def saw(self, condition: str, ok: bool, why: str = "") -> None:
        """``condition`` holds now (``ok``), or not, and why."""
        with self._lock:
            self._seen[condition] = (ok, self.clock(), why)

    def state(self) -> tuple[bool, list[str]]:
        """(ready, what stands in the way)."""
        with self._lock:
            if not self._said:
                return False, ["starting"]
            now, problems = self.clock(), []
            for condition, (ok, at, why) in sorted(self._seen.items()):
                if not ok:
                    problems.append(f"{condition}: {why or 'failing'}")
                elif now - at > self.within_s:
                    problems.append(f"{condition}: not seen for {now - at:.0f}s")
            return not problems, problems


_readiness = Readiness()


def mark_ready() -> None:
    _readiness.mark_ready()


def saw(condition: str, ok: bool, why: str = "") -> None:
    """Report a condition this process's readiness depends on (see ``Readiness``)."""
    _readiness.saw(condition, ok, why)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._send(200, b"ok\n")
        elif path == "/readyz":
            ready, problems = _readiness.state()
            body = "ready\n" if ready else "".join(f"{p}\n" for p in problems)
            self._send(200 if ready else 503, body.encode())
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
