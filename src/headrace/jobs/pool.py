"""A runner pool: carries out every job no runner holds, new ones and those whose runner
died (its lease ran out), until it is closed. The gateway runs one (``job_runners``);
``headrace batch runner`` runs one on its own. Several pools share the work through the job
store's leases: a job is carried out by one runner at a time, and taken over from its
progress record when that runner stops renewing its lease.

- bulk jobs (``/v1/batches``, ``headrace batch create``): a ``JobRunner`` each, on a thread,
  at most ``job_runners`` at once;
- single jobs (``/v1/jobs``): ``SingleJobs``, one shared reply topic for every pool.

Pools are expected to share the state directory (the jobs' spools) and the job store. Jobs
are taken round the tenants (``fair_claim``): the oldest job of the tenant with the fewest
running first, so one tenant's queue of jobs does not hold every slot.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from pathlib import Path

from headrace.config.settings import Settings
from headrace.jobs.fair_claim import fair_order
from headrace.jobs.files import is_s3
from headrace.jobs.lease import Halted, LeaseHeld, LeaseLost, runner_id
from headrace.jobs.run_options import RunOptions
from headrace.jobs.runner import JobRunner
from headrace.jobs.single import KIND
from headrace.jobs.single_runner import SingleJobs
from headrace.jobs.store import JobStore
from headrace.jobs.tables import Job
from headrace.transport import open_transport
from headrace.transport.guarantees import resend_after_s

log = logging.getLogger(__name__)

SINGLE_CLAIMS_PER_PASS = 100
# unfinished jobs looked at per pass to choose fairly among (oldest first)
CANDIDATES = 500
SWEEP_EVERY_S = 30.0  # expired files removed this often


class RunnerPool:
    def __init__(
        self,
        store: JobStore,
        settings: Settings,
        *,
        slots: int | None = None,
        options: RunOptions | None = None,
    ) -> None:
        """``slots``: bulk jobs carried at once (``settings.job_runners``)."""
        self.store = store
        self.settings = settings
        self.slots = settings.job_runners if slots is None else slots
        self.options = options or RunOptions.of(settings)
        self.owner = runner_id()
        self.stop = threading.Event()
        self.running: dict[str, threading.Thread] = {}
        self.transport = open_transport(settings)
        self.singles = SingleJobs(store, settings, self.transport)
        # a single job's request still unanswered this long is sent again, where the broker
        # may lose it (the transport's guarantees)
        self._resend_after_s = resend_after_s(
            settings.client_resend_after_s, self.transport.guarantees
        )
        self._threads: list[threading.Thread] = []
        self._swept = -SWEEP_EVERY_S

    def start(self) -> RunnerPool:
        for name, target in (("claim", self._claiming), ("collect", self._collecting)):
            thread = threading.Thread(target=target, name=f"jobs-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        log.info("runner pool %s: %d bulk slots", self.owner, self.slots)
        return self

    def close(self) -> None:
        """Stop claiming; running jobs stop at their next checkpoint and release their
        leases (any pool carries them on)."""
        self.stop.set()
        for thread in [*self._threads, *self.running.values()]:
            thread.join(timeout=30)
        self.singles.close()

    # --- claiming ----------------------------------------------------------------------------
    def _claiming(self) -> None:
        while not self.stop.is_set():
            try:
                self.step()
            except Exception:  # the job store or the broker away: try again next pass
                log.warning("runner pool pass failed", exc_info=True)
            self.stop.wait(self.options.poll_s)

    def _fairly(self, limit: int, kind: str) -> list[Job]:
        """Up to ``limit`` claimable jobs of ``kind``, taken round the tenants: the oldest job
        of the tenant with the fewest running first (``fair_claim``)."""
        candidates = self.store.claimable(CANDIDATES, kind=kind)
        running = self.store.running_by_tenant(kind=kind)
        return fair_order(candidates, running, lambda job: job.tenant)[:limit]

    def step(self) -> None:
        """One pass: renew the leases of single jobs awaiting their reply, produce again
        those overdue, claim single jobs no runner holds, start bulk jobs in free slots, and
        now and then remove expired files."""
        now = time.monotonic()
        if now - self._swept >= SWEEP_EVERY_S:
            self._swept = now
            remove_expired_files(self.store)
        lease_s = self.options.lease_s
        for job_id in list(self.singles.submitted):
            if not self.store.renew(job_id, self.owner, lease_s):
                self.singles.submitted.pop(job_id, None)  # ended, or taken over
        for job_id in self.singles.due_again(self._resend_after_s):
            self._submit(self.store.get(job_id))
        for job in self._fairly(SINGLE_CLAIMS_PER_PASS, kind=KIND):
            if self.store.claim(job.id, self.owner, lease_s):
                self._submit(job)
        self.running = {j: t for j, t in self.running.items() if t.is_alive()}
        free = self.slots - len(self.running)
        if free <= 0:
            return
        for job in self._fairly(CANDIDATES, kind="batch"):
            if job.id in self.running or free <= 0:
                continue
            thread = threading.Thread(
                target=self._carry, args=(job,), name=f"job-{job.id[-8:]}", daemon=True
            )
            self.running[job.id] = thread
            thread.start()
            free -= 1

    def _submit(self, job: Job) -> None:
        """One single job; one that fails keeps its lease until it runs out, then is tried
        again (by this pool or another), and holds up no other."""
        try:
            self.singles.submit(job)
        except Exception:
            log.warning("single job %s not submitted; tried again later", job.id, exc_info=True)

    def _carry(self, job: Job) -> None:
        runner = JobRunner(self.store, job.id, self.settings, self.options, halt=self.stop)
        try:
            runner.run()
        except LeaseHeld:
            pass  # another pool claimed it first
        except (LeaseLost, Halted):
            pass  # it is another runner's now
        except Exception:
            log.exception("job %s failed in pool %s", job.id, self.owner)

    # --- collecting ----------------------------------------------------------------------------
    def _collecting(self) -> None:
        while not self.stop.is_set():
            try:
                self.singles.collect(timeout_ms=200)
            except Exception:
                log.warning("collecting single jobs failed", exc_info=True)
                self.stop.wait(1.0)


def remove_expired_files(store: JobStore) -> int:
    """Remove files past their ``expires_after`` (record and local content), except those an
    unfinished job still reads (they go once it ends); how many went."""
    gone = 0
    for record in store.expired_files():
        if store.jobs_reading(record.id):
            continue
        store.delete_file(record.id, None)
        if not is_s3(record.location):
            with contextlib.suppress(FileNotFoundError):
                Path(record.location).unlink()
        gone += 1
    if gone:
        log.info("removed %d expired files", gone)
    return gone
