"""Start and stop pipeline processes (dispatcher, workers) as real subprocesses.

Used by the demo, the benchmark and the tests: each process is the same ``headrace``
command a user runs, configured through HEADRACE_* environment variables.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType


class ProcessFailed(RuntimeError):
    pass


class Proc:
    """One ``headrace`` subprocess whose output goes to a log file."""

    def __init__(self, name: str, args: list[str], env: Mapping[str, str], log_dir: Path) -> None:
        self.name = name
        self.args = args
        self.env = dict(env)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()

    def start(self, ready_timeout_s: float = 120.0) -> Proc:
        self._ready.clear()
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed by the reader thread
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "runtime.cli", *self.args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
        )
        pump = threading.Thread(target=self._pump, args=(self.popen, log), daemon=True)
        pump.start()
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

    def _pump(self, popen: subprocess.Popen[bytes], log: object) -> None:
        assert popen.stdout is not None
        with log:  # type: ignore[attr-defined]
            for line in popen.stdout:
                log.write(line)  # type: ignore[attr-defined]
                log.flush()  # type: ignore[attr-defined]
                if line.startswith(b"READY"):
                    self._ready.set()

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """kill -9, as a crash would."""
        if self.alive():
            assert self.popen is not None
            self.popen.kill()
            self.popen.wait(10)

    def stop(self, grace_s: float = 10.0) -> None:
        if not self.alive():
            return
        assert self.popen is not None
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(10)


class Pipeline:
    """A dispatcher and workers for one settings environment; a context manager.
    ``worker_buckets``: one entry per worker ("all" or "16,32"); default one worker for all;
    ``[]`` for none."""

    def __init__(
        self,
        env: Mapping[str, str] | None = None,
        worker_buckets: list[str] | None = None,
        log_dir: Path | None = None,
    ) -> None:
        self.env = {**os.environ, **(env or {})}
        self.env.setdefault("PYTHONUNBUFFERED", "1")
        prefix = self.env.get("HEADRACE_TOPIC_PREFIX", "headrace")
        self.log_dir = (
            log_dir or Path(self.env.get("HEADRACE_STATE_DIR", ".headrace")) / "logs" / prefix
        )
        self.workers = [
            Proc(f"worker-{i}", ["worker", "--buckets", b], self.env, self.log_dir)
            for i, b in enumerate(["all"] if worker_buckets is None else worker_buckets)
        ]
        self.dispatcher = Proc("dispatcher", ["dispatcher"], self.env, self.log_dir)

    def start(self) -> Pipeline:
        try:
            for worker in self.workers:
                worker.start()
            self.dispatcher.start()
        except BaseException:
            self.stop()  # leave no worker behind when a later process fails to start
            raise
        return self

    def add_worker(self, buckets: str = "all") -> Proc:
        """Start one more worker (``buckets``: "all" or comma-separated boundaries)."""
        worker = Proc(
            f"worker-{len(self.workers)}", ["worker", "--buckets", buckets], self.env, self.log_dir
        )
        self.workers.append(worker)
        return worker.start()

    def stop(self) -> None:
        for proc in [self.dispatcher, *self.workers]:
            proc.stop()

    def __enter__(self) -> Pipeline:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
