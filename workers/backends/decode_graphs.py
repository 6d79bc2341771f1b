"""A continuous decoder's steps replayed as CUDA graphs, one per bucket (``slot_cache.py``).

A decode step of a ~300M model launches about 750 kernels (24 layers): on an H200 the host
took 15 ms to launch what the GPU ran in a few (docs/benchmarks.md, "On a GPU"). A CUDA graph
records a step's kernels once and replays them with one launch. A bucket's step reads and
writes the same buffers every time (the slots' cache, tokens, positions) and reads nothing
back to the host, so it is recorded the first time its bucket runs (after two eager runs on
the stream it is recorded on, as CUDA graphs ask) and replayed from then on; the graphs
share one memory pool and one recording stream (they never run at once).

If recording fails, the reason is logged once and every step runs eagerly from then on:
slower, never wrong. ``captured`` and ``failed`` say what happened (the GPU bench reports
them).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger(__name__)

WARM_RUNS = 2  # eager runs on a side stream before a bucket is recorded


class StepGraphs:
    """``run(rows, columns, step)``, the ``slot_cache.Runner`` that replays ``step`` as the
    bucket's graph. ``record(step)`` records one (``torch.cuda.graph``; tests inject
    another)."""

    def __init__(self, record: Callable[[Callable[[], torch.Tensor]], Any] | None = None) -> None:
        self._record = record or self._cuda_graph
        self._graphs: dict[tuple[int, int], tuple[Any, torch.Tensor]] = {}
        self._pool: Any = None
        self._stream: Any = None  # where every bucket is warmed and recorded
        self.failed: str | None = None  # why recording failed (every step eager since)

    @property
    def captured(self) -> int:
        return len(self._graphs)

    def run(self, rows: int, columns: int, step: Callable[[], torch.Tensor]) -> torch.Tensor:
        if self.failed is not None:
            return step()
        entry = self._graphs.get((rows, columns))
        if entry is None:
            try:
                entry = self._graphs[(rows, columns)] = self._record(step)
            except Exception as exc:
                self.failed = f"{type(exc).__name__}: {exc}"
                log.warning("decode steps run eagerly: recording a CUDA graph failed (%s)", exc)
                return step()
        graph, out = entry
        graph.replay()
        return out

    def _cuda_graph(self, step: Callable[[], torch.Tensor]) -> tuple[Any, torch.Tensor]:
        """Warm runs and the recording on one side stream, the same for every bucket: the
        math libraries' per-stream handles and workspaces are made by the warm runs, not
        inside a recording, and graphs sharing a pool are recorded on one stream."""
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
            self._stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side = self._stream
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARM_RUNS):  # a step's writes are the same each run: no harm
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(
            graph, pool=self._pool, stream=side, capture_error_mode="thread_local"
        ):
            out = step()
        return graph, out
