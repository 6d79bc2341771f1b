"""Loading a worker's model in three stages, each with its own limit, before it takes work.

1. **load_weights**: fetch a registered version's files when its source is remote, check
   every file against the manifest (a mismatch ends the worker naming the file), read the
   weights;
2. **build**: place them on the device (fp16 on CUDA);
3. **warm_up**: batches shaped like the traffic (``warm_up``: lengths the bucket saw
   recently, from ``lengths``), measuring the peak memory per bucket.

A stage runs on the main thread under a watchdog: past its limit the watchdog writes the
load record (Redis) and ends the process with the stage's exit code, so nothing is left
hanging in a live process; the supervisor (Kubernetes, compose, or ``headrace.ops.processes``)
restarts it with backoff. Exit codes: 3 a stage failed, 4 a file differs from the manifest,
5 no bucket fits the memory plan, 81 / 82 / 83 load_weights / build / warm_up ran past its
limit.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import cast

import redis
import torch

from headrace.config.settings import Settings
from headrace.models.registry import ModelSpec, materialize, resolve
from headrace.schemas.errors import ChecksumMismatchError
from headrace.schemas.messages import SCORED
from headrace.workers import metrics
from headrace.workers.backends import EmbeddingBackend
from headrace.workers.backends.base import ModelBackend, Shape, default_shapes
from headrace.workers.backends.echo import EchoBackend
from headrace.workers.backends.generation import GenerationBackend
from headrace.workers.backends.scoring import ScoreBackend
from headrace.workers.backends.vllm_engine import VLLMBackend
from headrace.workers.faults import FaultyBackend

log = logging.getLogger(__name__)


class Stage(StrEnum):
    load_weights = "load_weights"
    build = "build"
    warm_up = "warm_up"


EXIT_FAILED = 3
EXIT_CHECKSUM = 4
EXIT_NO_ROOM = 5  # no bucket's batch of one row fits the memory plan
EXIT_TIMEOUT = {Stage.load_weights: 81, Stage.build: 82, Stage.warm_up: 83}
RECORDS_KEPT = 200


class LoadFailed(RuntimeError):
    """A stage failed (or a file differs from the manifest): the worker takes no work and
    exits with ``exit_code``."""

    def __init__(self, stage: Stage, outcome: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.stage = stage
        self.outcome = outcome
        self.exit_code = exit_code


@dataclass(frozen=True)
class LoadRecord:
    """How a worker's loading ended: ``ready``, or the stage that failed and why."""

    worker_id: str
    model: str  # name:version
    stage: str  # the stage that ended it, or "ready"
    outcome: str  # ok, failed, checksum, timeout
    message: str = ""
    exit_code: int = 0
    seconds: dict[str, float] = field(default_factory=dict)  # per finished stage
    at: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


class LoadRecords:
    """The last ``RECORDS_KEPT`` load records of a prefix's workers, in Redis."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.redis = client
        self.key = f"{prefix}:loads"

    def write(self, record: LoadRecord) -> None:
        pipe = self.redis.pipeline(transaction=False)
        pipe.zadd(self.key, {record.to_json(): record.at})
        pipe.zremrangebyrank(self.key, 0, -RECORDS_KEPT - 1)
        pipe.execute()

    def recent(self, limit: int = 20) -> list[LoadRecord]:
        raw = cast(list[bytes], self.redis.zrevrange(self.key, 0, limit - 1))
        return [LoadRecord(**json.loads(r)) for r in raw]


class Watchdog:
    """Runs a stage on the calling thread; ``on_timeout(stage, limit_s)`` is called from a
    timer thread when it runs past its limit (and is expected to end the process)."""

    def __init__(self, on_timeout: Callable[[Stage, float], None]) -> None:
        self.on_timeout = on_timeout

    def run(self, stage: Stage, fn: Callable[[], None], limit_s: float) -> float:
        timer = threading.Timer(limit_s, self.on_timeout, args=(stage, limit_s))
        timer.daemon = True
        started = time.perf_counter()
        timer.start()
        try:
            fn()
        finally:
            timer.cancel()
        return time.perf_counter() - started


def make_backend(settings: Settings, spec: ModelSpec, folder: Path) -> ModelBackend:
    """The backend for a model version whose files are in ``folder``."""
    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    backend: ModelBackend
    if spec.task == "generate":
        if spec.test_model:
            log.warning("%s is a TEST MODEL (random weights): its text is gibberish", spec.name)
        vllm = spec.backend == "vllm" or (
            spec.backend == "auto" and settings.generation_backend == "vllm"
        )
        if vllm:
            backend = VLLMBackend(spec.name, folder, spec.max_tokens, settings.vllm_engine_args())
        else:
            backend = GenerationBackend(
                spec.name,
                folder,
                spec.max_tokens,
                device=settings.device,
                continuous_rows=(
                    settings.generation_max_rows if settings.generation_slots > 1 else None
                ),
                cuda_graphs=settings.generation_cuda_graphs,
            )
    elif spec.task in SCORED:
        backend = ScoreBackend(
            spec.name, folder, spec.max_tokens, task=spec.task, device=settings.device
        )
    elif settings.worker_backend == "echo":
        log.warning("ECHO BACKEND: no model runs; replies are not embeddings (benchmarks only)")
        backend = EchoBackend(spec.name, folder, spec.max_tokens)
    else:
        backend = EmbeddingBackend(
            spec.name,
            folder,
            spec.max_tokens,
            device=settings.device,
            pooling=spec.pooling,
            normalize=spec.normalize,
        )
    markers = (
        settings.fault_poison_marker,
        settings.fault_crash_marker,
        settings.fault_slow_marker,
        settings.fault_stall_marker,
    )
    if any(markers):
        log.warning("FAULT INJECTION ENABLED: this worker fails marked inputs on purpose")
        backend = FaultyBackend(
            backend,
            poison=settings.fault_poison_marker,
            crash=settings.fault_crash_marker,
            slow=settings.fault_slow_marker,
            slow_s=settings.fault_slow_s,
            stall=settings.fault_stall_marker,
        )
    return backend


def device_name(backend: ModelBackend) -> str:
    device = getattr(backend, "device", None)
    if isinstance(device, torch.device) and device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    return "cpu"


class Loader:
    """Loads one worker's model version through the three stages."""

    def __init__(
        self,
        settings: Settings,
        worker_id: str,
        records: LoadRecords | None = None,
        watchdog: Watchdog | None = None,
    ) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.records = records
        self.watchdog = watchdog or Watchdog(self._timed_out)
        self.spec = resolve(settings, version=settings.model_version)
        self.seconds: dict[str, float] = {}

    def load(self, shapes: Sequence[Shape]) -> ModelBackend:
        """The loaded, warmed-up backend; LoadFailed when a stage fails (a stage past its
        limit ends the process instead)."""
        s = self.settings
        holder: dict[str, ModelBackend] = {}

        def weights() -> None:
            folder, fetched = materialize(self.spec, s, check=True)
            if fetched.files:
                log.info("fetched %s: %s", self.spec.ref, fetched)
            holder["backend"] = make_backend(s, self.spec, folder)
            holder["backend"].load_weights()

        self._stage(Stage.load_weights, weights, s.load_weights_timeout_s)
        backend = holder["backend"]
        self._stage(Stage.build, backend.build, s.build_timeout_s)
        self._stage(Stage.warm_up, lambda: backend.warm_up(shapes), s.warm_up_timeout_s)
        self._write(LoadRecord(self.worker_id, self.spec.ref, "ready", "ok", seconds=self.seconds))
        return backend

    def _stage(self, stage: Stage, fn: Callable[[], None], limit_s: float) -> None:
        hang = self.settings.fault_hang_stage == stage.value

        def body() -> None:
            if hang:
                log.warning("FAULT INJECTION: stage %s hangs on purpose", stage.value)
                threading.Event().wait()
            fn()

        try:
            self.seconds[stage.value] = round(self.watchdog.run(stage, body, limit_s), 3)
        except ChecksumMismatchError as exc:
            self._fail(stage, "checksum", str(exc), EXIT_CHECKSUM)
        except Exception as exc:
            self._fail(stage, "failed", f"stage {stage.value!r} failed: {exc}", EXIT_FAILED)
        metrics.stage_ended(stage.value, "ok")

    def _fail(self, stage: Stage, outcome: str, message: str, code: int) -> None:
        metrics.stage_ended(stage.value, "failed")
        record = LoadRecord(
            self.worker_id, self.spec.ref, stage.value, outcome, message, code, self.seconds
        )
        self._write(record)
        raise LoadFailed(stage, outcome, message, code)

    def _timed_out(self, stage: Stage, limit_s: float) -> None:
        """On the watchdog's thread: the record, one line on stderr, and the exit."""
        code = EXIT_TIMEOUT[stage]
        message = f"stage {stage.value!r} ran past its {limit_s:g}s limit"
        metrics.stage_ended(stage.value, "timeout")
        self._write(
            LoadRecord(
                self.worker_id, self.spec.ref, stage.value, "timeout", message, code, self.seconds
            )
        )
        sys.stderr.write(f"worker not ready: {message} (exit {code})\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(code)

    def _write(self, record: LoadRecord) -> None:
        if self.records is None:
            return
        try:
            self.records.write(record)
        except Exception:  # a record is for people; Redis away does not stop a start
            log.warning("load record not written: Redis unreachable", exc_info=True)


def load_backend(settings: Settings, buckets: list[int]) -> ModelBackend:
    """The pipeline model's backend, loaded and warmed up at the buckets' bounds (benchmarks
    use it; a worker goes through ``Loader`` with traffic-shaped warm-up)."""
    return Loader(settings, worker_id="bench").load(default_shapes(buckets, settings.warm_up_rows))
