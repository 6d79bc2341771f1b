"""A runner's lease on a job (``JobStore.claim``/``renew``): while it holds one, no other
runner carries the job out; a runner that died lets it run out and any live runner takes the
job over, resuming from its progress record.

Writes are fenced: a runner writes to the job's spools only while its lease is safely its
own, i.e. until ``SAFE_SHARE`` of the lease has passed since its last renewal (renewed at
every checkpoint, each second). A runner that was stopped longer (paused, cut from the job
store) stops writing before any other can have taken the job: ``LeaseLost``.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable

from headrace.jobs.store import JobStore

SAFE_SHARE = 0.6


class LeaseLost(RuntimeError):
    """This runner's lease ran out or went to another runner: it must stop writing."""


class Halted(RuntimeError):
    """The runner was asked to stop (its pool is closing): the job is left, checkpointed,
    to any runner."""


class LeaseHeld(RuntimeError):
    """Another runner holds the job's lease."""


def runner_id() -> str:
    """A name for this runner: host, process and a random part (unique per runner)."""
    return f"{socket.gethostname()[:30]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Lease:
    def __init__(
        self,
        store: JobStore,
        job_id: str,
        owner: str,
        lease_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.job_id = job_id
        self.owner = owner
        self.lease_s = lease_s
        self.clock = clock
        self._safe_until = -1.0

    def take(self, force: bool = False) -> None:
        """``force``: even from another runner (one its operator knows is gone)."""
        started = self.clock()
        if not self.store.claim(self.job_id, self.owner, self.lease_s, force=force):
            held = self.store.get(self.job_id)
            raise LeaseHeld(
                f"job {self.job_id} is being run by {held.lease_owner} "
                f"(lease until {held.lease_expires_at:%H:%M:%S} UTC)"
                if held.lease_expires_at
                else f"job {self.job_id} is being run by another runner"
            )
        self._safe_until = started + self.lease_s * SAFE_SHARE

    def renew(self) -> None:
        started = self.clock()
        if not self.store.renew(self.job_id, self.owner, self.lease_s):
            self._safe_until = -1.0
            raise LeaseLost(f"job {self.job_id}: the lease of {self.owner} went to another runner")
        self._safe_until = started + self.lease_s * SAFE_SHARE

    def guard(self) -> None:
        """Raise ``LeaseLost`` unless writing for the job is still safely this runner's."""
        if self.clock() >= self._safe_until:
            raise LeaseLost(f"job {self.job_id}: the lease of {self.owner} was not renewed in time")

    def release(self) -> None:
        self.store.release(self.job_id, self.owner)
