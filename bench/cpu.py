"""CPU seconds used by processes, read from /proc (Linux), to see who competes with the model."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0.0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICKS


def snapshot(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def cores_busy(cpu_s: Mapping[str, float], wall_s: float) -> dict[str, float]:
    """Each process's CPU seconds over ``wall_s``: the cores it kept busy on average."""
    return {name: sec / wall_s for name, sec in cpu_s.items()}


@dataclass(frozen=True)
class Split:
    """The pipeline's tokens/s against the raw loops' ((b)/(a')) as the product of two
    parts: the cores its workers got (against the cores the loops kept busy) and the useful
    tokens they made of each CPU second (against the loops'). What the workers did not get
    went to the other processes (the client, the dispatcher, the broker) or stayed idle.

    Both parts follow from the figures alone: tokens/s = tokens per CPU second x cores busy."""

    cores: int  # of the machine
    during_b: Mapping[str, float]  # cores each process kept busy during (b)
    loops_cores: float  # cores the raw loops kept busy during (a')
    workers_tokens_per_cpu_s: float  # useful tokens the workers made of a CPU second in (b)
    loops_tokens_per_cpu_s: float  # ... and the loops in (a')

    @classmethod
    def of(
        cls,
        cpu_s: Mapping[str, float],
        wall_s: float,
        real_tokens: int,
        loops_tokens_per_s: float,
        loops_tokens_per_cpu_s: float,
        cores: int | None = None,
    ) -> Split:
        """``cpu_s``: each process's CPU seconds during (b), its workers named worker-*;
        ``wall_s``, ``real_tokens``: (b)'s; the loops' tokens/s and tokens per CPU second."""
        during_b = cores_busy(cpu_s, wall_s)
        workers_s = _workers(during_b) * wall_s
        return cls(
            cores=cores or os.cpu_count() or 1,
            during_b=during_b,
            loops_cores=loops_tokens_per_s / loops_tokens_per_cpu_s,
            workers_tokens_per_cpu_s=real_tokens / max(workers_s, 1e-9),
            loops_tokens_per_cpu_s=loops_tokens_per_cpu_s,
        )

    @property
    def workers_cores(self) -> float:
        return _workers(self.during_b)

    @property
    def per_cpu(self) -> float:
        """The workers' useful tokens per CPU second against the loops'."""
        return self.workers_tokens_per_cpu_s / self.loops_tokens_per_cpu_s

    @property
    def others(self) -> dict[str, float]:
        return {n: c for n, c in self.during_b.items() if not n.startswith("worker")}

    @property
    def idle(self) -> float:
        return max(0.0, self.cores - sum(self.during_b.values()))

    @property
    def share(self) -> float:
        """The workers' cores in (b) against the loops' in (a')."""
        return self.workers_cores / self.loops_cores

    @property
    def ratio(self) -> float:
        """(b)/(a'), from its two parts."""
        return self.share * self.per_cpu


def _workers(cores: Mapping[str, float]) -> float:
    """The cores the workers (processes named worker-*) kept busy, together."""
    return sum(c for name, c in cores.items() if name.startswith("worker"))
