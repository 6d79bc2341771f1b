"""The worker autoscaling policy, as ``infra/k8s/scaling.yaml`` deploys it with KEDA and the
Kubernetes HPA, written out so it can be simulated (``bench/scaling.py``) and checked
against the manifest (``tests/infra/test_k8s.py``).

Every ``polling_s`` two signals give a raw count, the higher of: the group's queued work in
seconds (the sum of ``headrace_dispatcher_queued_work_seconds`` over its buckets) over
``threshold_s``, which answers a backlog; and its busy workers (device-seconds computed per
second, ``rate(headrace_batch_compute_seconds_sum[1m])``) over ``busy_target``, which holds
the fleet a steady load needs (a backlog-only signal reads a fleet that just keeps up as
idle, lets it shrink, and oscillates). Clamped to ``[min_workers, max_workers]``; below
``activation_s`` of queued work the backlog signal asks for nothing. Up: at once, by at
most ``up_percent`` per ``up_period_s``. Down: to the highest count recommended over the last
``down_stabilization_s``, by at most ``down_pods`` per ``down_period_s``. A ``Schedule``
(KEDA's cron trigger) holds at least its count of workers over a known burst, so they are
warm when it starts instead of cold-starting into it. Pure, with the time passed in.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Schedule:
    """At least ``workers`` from minute ``start_minute`` of each hour to ``end_minute``
    (60: the top of the hour), as the cron trigger ``start: "<start> * * * *"``,
    ``end: "<end % 60> * * * *"`` says."""

    start_minute: int
    end_minute: int
    workers: int

    def wanted(self, unix_s: float) -> int:
        minute = (unix_s % 3600) / 60
        return self.workers if self.start_minute <= minute < self.end_minute else 0


@dataclass(frozen=True)
class ScalingPolicy:
    threshold_s: float = 5.0
    activation_s: float = 0.5
    busy_target: float = 0.8  # busy workers per worker
    min_workers: int = 1
    max_workers: int = 16
    polling_s: float = 15.0
    up_percent: float = 100.0
    up_period_s: float = 15.0
    down_stabilization_s: float = 300.0
    down_pods: int = 1
    down_period_s: float = 60.0
    schedule: Schedule | None = None

    def raw(self, queued_work_s: float, busy_workers: float = 0.0, unix_s: float = 0.0) -> int:
        backlog = (
            0 if queued_work_s < self.activation_s else math.ceil(queued_work_s / self.threshold_s)
        )
        wanted = max(backlog, math.ceil(busy_workers / self.busy_target - 1e-9))
        if self.schedule is not None:  # the HPA takes the highest of its triggers
            wanted = max(wanted, self.schedule.wanted(unix_s))
        return max(self.min_workers, min(self.max_workers, wanted))


@dataclass
class Autoscaler:
    policy: ScalingPolicy
    replicas: int
    _recommended: deque[tuple[float, int]] = field(default_factory=deque)
    _last_up: float = -math.inf
    _last_down: float = -math.inf
    _up_base: int = 0  # replicas at the start of the current up period

    def step(self, now: float, queued_work_s: float, busy_workers: float = 0.0) -> int:
        """The replica count after this poll."""
        p = self.policy
        wanted = p.raw(queued_work_s, busy_workers, now)
        self._recommended.append((now, wanted))
        while self._recommended and self._recommended[0][0] < now - p.down_stabilization_s:
            self._recommended.popleft()
        if wanted > self.replicas:
            if now - self._last_up >= p.up_period_s:
                self._last_up, self._up_base = now, self.replicas
            ceiling = max(self._up_base + 1, math.floor(self._up_base * (1 + p.up_percent / 100)))
            self.replicas = min(wanted, ceiling, p.max_workers)
        else:
            stable = max(count for _, count in self._recommended)
            if stable < self.replicas and now - self._last_down >= p.down_period_s:
                self.replicas = max(stable, self.replicas - p.down_pods)
                self._last_down = now
        return self.replicas
