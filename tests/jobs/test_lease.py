"""Job leases in the real job store (SQLite and PostgreSQL): one runner at a time, a lease
that ran out is anybody's, and a runner writes only while its lease is safely its own."""

from __future__ import annotations

import threading
import time

import pytest

from headrace.jobs.lease import SAFE_SHARE, Lease, LeaseHeld, LeaseLost
from headrace.jobs.lifecycle import JobStatus
from headrace.jobs.store import JobStore
from tests.clock import FakeClock
from tests.jobs.test_store import make


def test_one_runner_holds_a_job_until_its_lease_runs_out(store_url: str) -> None:
    store = JobStore(store_url)
    job = make(store, job_id="job-a")
    assert [j.id for j in store.claimable()] == ["job-a"]  # never taken
    assert store.claim(job, "r1", lease_s=0.5)
    assert not store.claim(job, "r2", lease_s=30)  # held
    assert store.claim(job, "r1", lease_s=0.5)  # its own again
    assert store.claimable() == [] and not store.claimable_now(job)
    assert store.renew(job, "r1", lease_s=0.5) and not store.renew(job, "r2", lease_s=30)
    time.sleep(0.7)
    assert [j.id for j in store.claimable()] == ["job-a"] and store.claimable_now(job)
    assert store.claim(job, "r2", lease_s=30)  # run out: anybody's
    assert not store.renew(job, "r1", lease_s=30)  # the old holder learns it lost it
    assert store.claim(job, "r3", lease_s=30, force=True)  # an operator's take-over
    store.release(job, "r2")  # not r2's any more: nothing happens
    assert store.get(job).lease_owner == "r3"
    store.release(job, "r3")
    assert store.claimable_now(job)


def test_ended_jobs_are_nobodys_and_claimable_filters_by_kind(store_url: str) -> None:
    store = JobStore(store_url)
    make(store, job_id="bulk")
    make(store, kind="job", job_id="single")
    assert [j.id for j in store.claimable(kind="job")] == ["single"]
    store.move("bulk", JobStatus.failed, "gone")
    assert [j.id for j in store.claimable()] == ["single"]
    assert not store.claim("bulk", "r1", lease_s=30)  # an ended job has no lease to take


def test_of_many_runners_claiming_at_once_exactly_one_wins(store_url: str) -> None:
    store = JobStore(store_url)
    job = make(store, job_id="contended")
    wins: list[str] = []
    start = threading.Barrier(8)

    def claim(owner: str) -> None:
        start.wait()
        if store.claim(job, owner, lease_s=30):
            wins.append(owner)

    threads = [threading.Thread(target=claim, args=(f"r{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and store.get(job).lease_owner == wins[0]


def test_a_runner_stops_writing_before_its_lease_can_go_to_another(tmp_path: object) -> None:
    store = JobStore(f"sqlite:///{tmp_path}/jobs.db")
    job = make(store, job_id="fenced")
    clock = FakeClock()
    lease = Lease(store, job, "r1", lease_s=10, clock=clock)
    lease.take()
    with pytest.raises(LeaseHeld, match="r1"):
        Lease(store, job, "r2", lease_s=10).take()
    clock.now += 10 * SAFE_SHARE - 0.1
    lease.guard()  # still safely its own
    clock.now += 0.2
    with pytest.raises(LeaseLost):
        lease.guard()  # not renewed in time: no more writes
    lease.renew()
    lease.guard()
    store.claim(job, "r2", lease_s=10, force=True)
    with pytest.raises(LeaseLost, match="another runner"):
        lease.renew()
    with pytest.raises(LeaseLost):
        lease.guard()
