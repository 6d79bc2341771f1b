"""The job store on a SQLite file and on the PostgreSQL server running on this machine:
migrations applied, lifecycle enforced, tenants kept apart."""

from __future__ import annotations

import pytest

from headrace.jobs.lifecycle import IllegalTransition, JobStatus
from headrace.jobs.store import JobNotFound, JobStore


def make(store: JobStore, tenant: str = "t1") -> str:
    job = store.create(
        tenant=tenant,
        endpoint="/v1/embeddings",
        model="all-MiniLM-L6-v2",
        input_location="/tmp/in.jsonl",
        input_format="openai",
        spool_dir="/tmp/spool",
        metadata={"purpose": "test"},
    )
    return job.id


def test_store_migrates_creates_moves_and_isolates(store_url: str) -> None:
    store = JobStore(store_url)
    assert store.revision() == "0002"
    JobStore(store_url)  # opening again is a no-op migration
    first = make(store)
    other = make(store, tenant="t2")
    job = store.get(first, tenant="t1")
    assert job.state is JobStatus.validating and job.metadata_ == {"purpose": "test"}
    with pytest.raises(JobNotFound):
        store.get(first, tenant="t2")  # another tenant's job is not found
    assert [j.id for j in store.list(tenant="t1")] == [first]
    assert {j.id for j in store.list()} == {first, other}

    store.move(first, JobStatus.in_progress)
    store.set_fields(first, total=10, completed=4, failed=1, reply_offset=77)
    done = store.move(first, JobStatus.finalizing)
    assert done.in_progress_at is not None and done.finalizing_at is not None
    assert (done.total, done.completed, done.failed, done.reply_offset) == (10, 4, 1, 77)
    store.move(first, JobStatus.completed)
    with pytest.raises(IllegalTransition):
        store.move(first, JobStatus.cancelling)
    failed = store.move(other, JobStatus.failed, "the input file has no lines")
    assert failed.errors == [{"code": "failed", "message": "the input file has no lines"}]
    with pytest.raises(JobNotFound):
        store.move("batch_nope", JobStatus.failed)
