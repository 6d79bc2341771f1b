"""How a job runner runs a job (``RunOptions``): shared by the runner, its submitter and the
pool, so that none of them imports another for it. Built once where the runner or the pool
is made (``RunOptions.of(settings, ...)``: the command line, the gateway); the defaults are
the settings' own (``default``), one source for each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from headrace.config.settings import Settings, default
from headrace.schemas.topics import Lane


@dataclass(frozen=True)
class RunOptions:
    window: int = 5000  # requests in the air at most
    checkpoint_s: float = 1.0
    cancel_wait_s: float = 30.0
    truncate: bool = False  # cut over-long inputs instead of failing their lines
    lane: Lane = "bulk"  # jobs wait for online traffic; "online" only to compare (bench)
    take_over: bool = False  # take the job's lease even while another runner holds it
    # a runner's lease on its job: renewed while it runs, anybody's once run out
    lease_s: float = default("job_lease_s")
    # a job stopped by a full disk is carried on after this long
    disk_full_retry_s: float = default("job_disk_full_retry_s")
    poll_s: float = default("job_poll_s")  # a pool looks for jobs to claim this often

    @classmethod
    def of(cls, settings: Settings, **changes: Any) -> RunOptions:
        """The runner's part of ``settings``, with ``changes`` (field name -> value)."""
        taken = dict(
            lease_s=settings.job_lease_s,
            disk_full_retry_s=settings.job_disk_full_retry_s,
            poll_s=settings.job_poll_s,
        )
        return cls(**{**taken, **changes})
