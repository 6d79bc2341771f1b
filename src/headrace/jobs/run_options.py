"""How a job runner runs a job (``RunOptions``): shared by the runner, its submitter and the
pool, so that none of them imports another for it."""

from __future__ import annotations

from dataclasses import dataclass

from headrace.schemas.topics import Lane


@dataclass
class RunOptions:
    window: int = 5000  # requests in the air at most
    checkpoint_s: float = 1.0
    cancel_wait_s: float = 30.0
    truncate: bool = False  # cut over-long inputs instead of failing their lines
    lane: Lane = "bulk"  # jobs wait for online traffic; "online" only to compare (bench)
    lease_s: float | None = None  # None: settings.job_lease_s
    take_over: bool = False  # take the job's lease even while another runner holds it
