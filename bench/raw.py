"""The model alone, in tight loops over the batches a pipeline run formed (tokenisation
included): the yardstick for the pipeline's tokens/s.

- one loop with torch's threads as configured (figure (a));
- ``processes`` loops at once, one torch thread each, the batches split between them: the
  same use of the cores as a local pipeline's workers (``runtime.processes.local_workers``).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier
from typing import Any, cast

from headrace.config.settings import Settings

Groups = list[list[str]]


def _backend(settings: Settings) -> Any:
    from headrace.workers.backends.base import Backend
    from headrace.workers.loading import load_backend

    return cast(Backend, load_backend(settings, settings.buckets))


def _loop(backend: Any, groups: Groups) -> int:
    real = 0
    for group in groups:
        encoded = backend.encode(group, [False] * len(group))
        _, batch_real, _ = backend.embed(encoded, [True] * len(group))
        real += int(batch_real)
    return real


def one_loop(groups: Groups, settings: Settings) -> float:
    """Useful tokens/s of one tight loop in this process."""
    backend = _backend(settings)
    start = time.perf_counter()
    real = _loop(backend, groups)
    return real / (time.perf_counter() - start)


def _part(settings_json: str, groups: Groups, start: Barrier, out: Any) -> None:
    settings = Settings.model_validate_json(settings_json)
    backend = _backend(settings)  # one torch thread: torch_threads is 1 in these settings
    start.wait()
    began, cpu = time.time(), time.process_time()
    real = _loop(backend, groups)
    out.put((began, time.time(), real, time.process_time() - cpu))


def split(groups: Groups, parts: int) -> list[Groups]:
    """Batches to ``parts`` loops, largest first to the least loaded (cost: rows x longest
    text in characters, a stand-in for padded tokens)."""
    loads = [0] * parts
    out: list[Groups] = [[] for _ in range(parts)]
    for group in sorted(groups, key=lambda g: -len(g) * max(map(len, g))):
        i = loads.index(min(loads))
        out[i].append(group)
        loads[i] += len(group) * max(map(len, group))
    return out


@dataclass(frozen=True)
class Loops:
    tokens_per_s: float  # total real tokens over the span from the first start to the last end
    tokens_per_cpu_s: float  # total real tokens over the loops' CPU seconds (all threads)


def parallel_loops(groups: Groups, settings: Settings, processes: int) -> Loops:
    """``processes`` loops running at once, one torch thread each."""
    ctx = mp.get_context("spawn")
    start = ctx.Barrier(processes)
    out = ctx.Queue()
    one_thread = settings.model_copy(update={"torch_threads": 1}).model_dump_json()
    procs = [
        ctx.Process(target=_part, args=(one_thread, part, start, out))
        for part in split(groups, processes)
    ]
    for proc in procs:
        proc.start()
    results: list[tuple[float, float, int, float]] = [out.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    began = min(r[0] for r in results)
    ended = max(r[1] for r in results)
    real = sum(r[2] for r in results)
    return Loops(real / (ended - began), real / sum(r[3] for r in results))
