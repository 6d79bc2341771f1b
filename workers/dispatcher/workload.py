"""The autoscaling signal: seconds of work queued per bucket.

A bucket's queued work is its backlog (requests on its topic not yet answered) times what one
of its requests recently cost a worker (its batch's compute time over the rows it computed,
an exponentially weighted mean over recent batches). Before a bucket has had a batch, the
cost is estimated from the model's throughput across all buckets (seconds per padded token
seen so far, or ``prior_tokens_per_s`` before any batch) times the bucket's length, so a cold
bucket with a backlog still asks for workers. Pure: the dispatcher's core feeds it
completions, the shell multiplies by the lag it reads from the broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SMOOTHING = 0.2  # weight of the newest batch in the running mean


@dataclass
class Workload:
    buckets: tuple[int, ...]
    prior_tokens_per_s: float = 5000.0
    _per_request_s: dict[int, float] = field(default_factory=dict)
    _per_padded_token_s: float | None = None

    def observe(self, bucket: int, compute_s: float, rows: int, padded_tokens: int) -> None:
        """A batch of ``bucket`` computed ``rows`` requests (``padded_tokens`` in all) in
        ``compute_s`` seconds."""
        if rows <= 0 or compute_s < 0:
            return
        per_request = compute_s / rows
        old = self._per_request_s.get(bucket)
        self._per_request_s[bucket] = (
            per_request if old is None else old + SMOOTHING * (per_request - old)
        )
        if padded_tokens > 0:
            per_token = compute_s / padded_tokens
            old_t = self._per_padded_token_s
            self._per_padded_token_s = (
                per_token if old_t is None else old_t + SMOOTHING * (per_token - old_t)
            )

    def seen(self, bucket: int) -> bool:
        """Has a batch of ``bucket`` been observed (its cost measured, not estimated)?"""
        return bucket in self._per_request_s

    def seconds_per_request(self, bucket: int) -> float:
        known = self._per_request_s.get(bucket)
        if known is not None:
            return known
        per_token = self._per_padded_token_s
        if per_token is None:
            per_token = 1.0 / self.prior_tokens_per_s
        return per_token * bucket

    def queued_seconds(self, bucket: int, backlog: int) -> float:
        """Seconds one worker would need for ``backlog`` requests of ``bucket``."""
        return max(0, backlog) * self.seconds_per_request(bucket)
