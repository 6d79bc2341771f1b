"""Start and stop pipeline processes (dispatcher, workers) as real subprocesses.

Used by the demo, the benchmark and the tests: each process is the same ``headrace``
command a user runs, configured through HEADRACE_* environment variables.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from headrace.health.ready import is_ready_line
from headrace.ops import prefork
from headrace.ops.supervisor import Supervisor

TARGETS = "metrics-targets.json"  # read by `headrace top`
_prefork = {"on": False}


def use_prefork(on: bool = True) -> None:
    """Start every later worker and dispatcher ``Proc`` by forking a parent that imported it
    already (``headrace.ops.prefork``: a worker ready in under 2 s, not 6-7) or, off, as a
    fresh interpreter (the default)."""
    _prefork["on"] = on


class ProcessFailed(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_workers(device: str = "auto", torch_threads: int | None = None) -> int:
    """How many workers a local pipeline (demo, benchmark) runs for one model. On CPU: one
    per core, each with one torch thread (``worker_env``). Measured on 2 cores shared with the
    broker, the dispatcher and the client (``bench.pipeline``): 2 workers x 1 thread reached
    0.88 of the raw model loop, 1 worker x 2 threads 0.80, since a torch op split over both
    cores stalls whenever another process takes one of them. On CUDA, or with
    ``torch_threads`` set: one."""
    if torch_threads:
        return 1
    if device != "cpu":
        import torch

        if torch.cuda.is_available():
            return 1
    return max(1, len(os.sched_getaffinity(0)))


def worker_env(workers: int) -> dict[str, str]:
    """Environment of a local pipeline's workers: one torch thread each when there are
    several (one per core)."""
    return {"HEADRACE_TORCH_THREADS": "1"} if workers > 1 else {}


class Proc:
    """One ``headrace`` subprocess whose output goes to a log file."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], log_dir: Path) -> None:
        self.name = name
        self.args = args
        self.env = dict(env)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | prefork.Forked | None = None
        self._ready = threading.Event()

    def launch(self) -> Proc:
        """Start it without waiting for it to be ready; one already running is left as it is
        (a second process would replace its handle, and ``stop`` would never reach it)."""
        if self.alive():
            return self
        self._ready.clear()
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed by the reader thread
        if _prefork["on"] and self.args[0] in prefork.PRELOAD:
            self.popen = prefork.shared(self.args[0]).spawn(self.args, self.env)
        else:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "headrace.ops.cli", *self.args],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
            )
        self._pump_thread = threading.Thread(target=self._pump, args=(self.popen, log), daemon=True)
        self._pump_thread.start()
        return self

    def ready(self) -> bool:
        return self._ready.is_set()

    def start(self, ready_timeout_s: float = 120.0) -> Proc:
        return self.launch().wait_ready(ready_timeout_s)

    def wait_ready(self, ready_timeout_s: float = 120.0) -> Proc:
        """Wait until it says it is ready (ProcessFailed if it exits or is not in time)."""
        assert self.popen is not None
        pump = self._pump_thread
        deadline = time.monotonic() + ready_timeout_s
        while not self._ready.wait(0.05):
            if self.popen.poll() is not None:
                # It may have said READY just before it ended (a crash test's worker takes
                # the crashing batch at once): that counts as started.
                pump.join(5)
                if self._ready.is_set():
                    break
                raise ProcessFailed(
                    f"{self.name} exited with {self.popen.returncode}; see {self.log_path}"
                )
            if time.monotonic() > deadline:
                self.stop()
                raise ProcessFailed(f"{self.name} not ready in {ready_timeout_s}s; {self.log_path}")
        return self

    def _pump(self, popen: subprocess.Popen[bytes] | prefork.Forked, log: object) -> None:
        assert popen.stdout is not None
        with log:  # type: ignore[attr-defined]
            for line in popen.stdout:
                log.write(line)  # type: ignore[attr-defined]
                log.flush()  # type: ignore[attr-defined]
                if is_ready_line(line):
                    self._ready.set()

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_code(self) -> int | None:
        """How it ended (None: running, or never started)."""
        return self.popen.poll() if self.popen is not None else None

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.alive():
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait(10)

    def stop(self, grace_s: float = 10.0) -> None:
        self.terminate()
        self.wait_stopped(grace_s)

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM): it finishes what it holds and exits."""
        if self.alive():
            assert self.popen is not None
            self.popen.send_signal(signal.SIGTERM)

    def wait_stopped(self, grace_s: float = 10.0) -> None:
        """Wait for it to exit; past ``grace_s``, kill it."""
        if self.popen is None:
            return
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)


class Pipeline:
    """A dispatcher and workers for one settings environment; a context manager.
    ``worker_buckets``: one entry per worker ("all" or "16,32"); default one worker for all;
    ``[]`` for none. ``worker_env``: added to the workers' environment only. ``dispatchers``:
    how many dispatchers share the bucket topics in their one consumer group. ``metrics``:
    each process serves /metrics on a free port, listed in ``<state dir>/metrics-targets.json``
    for ``headrace top``."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        worker_buckets: list[str] | None = None,
        log_dir: Path | None = None,
        worker_env: Mapping[str, str] | None = None,
        dispatchers: int = 1,
        metrics: bool = False,
        supervise: bool = False,
    ) -> None:
        """``supervise``: a worker that ends on its own is started again with backoff
        (``headrace.ops.supervisor``)."""
        self.env = {**os.environ, **(env or {})}
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        self.worker_env = {**self.env, **(worker_env or {})}
        prefix = self.env.get("HEADRACE_TOPIC_PREFIX", "headrace")
        self.log_dir = (
            log_dir or Path(self.env.get("HEADRACE_STATE_DIR", ".headrace")) / "logs" / prefix
        )
        self.workers = [
            Proc(f"worker-{i}", ["worker", "--buckets", b], self.worker_env, self.log_dir)
            for i, b in enumerate(["all"] if worker_buckets is None else worker_buckets)
        ]
        self.dispatchers = [
            Proc(
                "dispatcher" if i == 0 else f"dispatcher-{i}",
                ["dispatcher"],
                self.env,
                self.log_dir,
            )
            for i in range(dispatchers)
        ]
        self.dispatcher = self.dispatchers[0]
        self.supervisor = Supervisor(self.workers) if supervise else None
        self.targets_file: Path | None = None
        if metrics:
            self.targets_file = Path(self.env.get("HEADRACE_STATE_DIR", ".headrace")) / TARGETS
            for proc in [*self.dispatchers, *self.workers]:
                proc.args += ["--metrics-port", str(free_port())]

    @property
    def metrics_urls(self) -> list[str]:
        """Where each process serves /metrics (none unless started with ``metrics``)."""
        urls = []
        for proc in [*self.dispatchers, *self.workers]:
            if "--metrics-port" in proc.args:
                port = proc.args[proc.args.index("--metrics-port") + 1]
                urls.append(f"http://127.0.0.1:{port}")
        return urls

    def start(self) -> Pipeline:
        """Every process launched at once, then each waited for until ready."""
        try:
            for proc in [*self.workers, *self.dispatchers]:
                proc.launch()
            for proc in [*self.workers, *self.dispatchers]:
                proc.wait_ready()
            if self.targets_file is not None:
                self.targets_file.parent.mkdir(parents=True, exist_ok=True)
                self.targets_file.write_text(json.dumps(self.metrics_urls))
            if self.supervisor is not None:
                self.supervisor.start()
        except BaseException:
            self.stop()  # leave no worker behind when a later process fails to start
            raise
        return self

    def add_worker(
        self, buckets: str = "all", env: Mapping[str, str] | None = None, wait: bool = True
    ) -> Proc:
        """Start one more worker (``buckets``: "all" or comma-separated boundaries; ``env``:
        added to the workers' environment, e.g. the model version it serves). ``wait``:
        until it is ready."""
        worker = Proc(
            f"worker-{len(self.workers)}",
            ["worker", "--buckets", buckets],
            {**self.worker_env, **(env or {})},
            self.log_dir,
        )
        self.workers.append(worker)
        return worker.start() if wait else worker.launch()

    def stop(self) -> None:
        """Every process asked to stop at once, then each waited for: the pipeline takes as
        long to stop as its slowest process, not their sum."""
        if self.supervisor is not None:
            self.supervisor.stop()
        procs = [*self.dispatchers, *self.workers]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait_stopped()
        if self.targets_file is not None:
            self.targets_file.unlink(missing_ok=True)

    def __enter__(self) -> Pipeline:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def local_pipeline(
    env: Mapping[str, str], device: str, torch_threads: int | None, metrics: bool = False
) -> Pipeline:
    """The demo's and the benchmark's pipeline: ``local_workers`` workers for all buckets."""
    workers = local_workers(device, torch_threads)
    return Pipeline(
        env=env, worker_buckets=["all"] * workers, worker_env=worker_env(workers), metrics=metrics
    )
