"""How often the continuous decoder lets waiting rows join (``continuous.py``): a prefill is a
forward pass of its own, which every running row waits through.

On a CPU a prefill of a few rows costs about a step; on a GPU whose steps replay as CUDA
graphs a prefill still launches its kernels one by one (a ~300M model: ~15 ms of host time
on an H200, against a few ms for a recorded step), so joining every few steps would spend
about half the loop's time in prefills. Rows therefore join no more often than every
``join_every`` steps, nor more often than keeps prefills to ``PREFILL_SHARE`` of the loop's
time at their measured cost against a step's (each an average over recent passes); never
less often than every ``MOST_STEPS``. (The loop also joins at once when it is empty or the
waiting rows would grow it by a quarter: that is the loop's, not this.)
"""

from __future__ import annotations

import math

PREFILL_SHARE = 0.25  # at most this much of the loop's time in prefills, joining on cadence
MOST_STEPS = 64  # rows wait at most this many steps for the cadence
WEIGHT = 0.2  # of each new pass in the averages


class Cadence:
    def __init__(self, join_every: int) -> None:
        self.join_every = join_every
        self.prefill_s: float | None = None  # a prefill's time, averaged
        self.step_s: float | None = None  # a step's time, averaged

    def prefilled(self, seconds: float) -> None:
        self.prefill_s = _averaged(self.prefill_s, seconds)

    def stepped(self, seconds: float) -> None:
        self.step_s = _averaged(self.step_s, seconds)

    def steps_between_joins(self) -> int:
        """``join_every``, or more where prefills cost that much against steps."""
        if not self.prefill_s or not self.step_s:
            return self.join_every
        # n steps then one prefill: prefill / (n x step + prefill) <= PREFILL_SHARE
        needed = math.ceil(self.prefill_s * (1 - PREFILL_SHARE) / PREFILL_SHARE / self.step_s)
        return max(self.join_every, min(needed, MOST_STEPS))


def _averaged(average: float | None, value: float) -> float:
    return value if average is None else average + WEIGHT * (value - average)
