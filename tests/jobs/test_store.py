"""The job store on a SQLite file and on the PostgreSQL server running on this machine:
migrations applied, lifecycle enforced, tenants kept apart."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from headrace.jobs.api_keys import KeyOwner
from headrace.jobs.lifecycle import IllegalTransition, JobStatus
from headrace.jobs.pool import remove_expired_files
from headrace.jobs.store import JobNotFound, JobStore
from headrace.schemas.tenants import TenantNameError
from headrace.sql import newest_revision


def make(store: JobStore, tenant: str = "t1", kind: str = "batch", job_id: str = "") -> str:
    job = store.create(
        id=job_id,
        kind=kind,
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
    assert store.revision() == newest_revision() is not None
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
    assert failed.errors == [  # OpenAI's shape of a batch error
        {"code": "failed", "message": "the input file has no lines", "param": None, "line": None}
    ]
    with pytest.raises(JobNotFound):
        store.move("batch_nope", JobStatus.failed)


def test_pages_of_batches_and_files_follow_their_cursor(store_url: str, tmp_path: Path) -> None:
    store = JobStore(store_url)
    batches = [make(store) for _ in range(5)]  # oldest first
    single = store.create(
        tenant="t1",
        endpoint="/v1/embeddings",
        model="m",
        input_location="/tmp/in.jsonl",
        input_format="openai",
        spool_dir="/tmp/spool",
        kind="job",
    ).id
    make(store, tenant="t2")
    pages, after = [], None
    while True:
        page = store.list(tenant="t1", limit=2, after=after, kind="batch")
        if not page:
            break
        pages.append([j.id for j in page])
        after = page[-1].id
    newest = sorted(batches, key=lambda b: (store.get(b).created_at, b), reverse=True)
    assert pages == [newest[:2], newest[2:4], newest[4:]]
    assert all(single not in page for page in pages)
    assert single in [j.id for j in store.list(tenant="t1")]
    with pytest.raises(JobNotFound):  # another tenant's id is no cursor
        store.list(tenant="t2", after=batches[0])

    paths = [tmp_path / f"f{i}.jsonl" for i in range(3)]
    for i, path in enumerate(paths):
        path.write_text("x" * (i + 1))
    files = [store.add_file("t1", "batch", p.name, str(p)).id for p in paths]
    files.sort(key=lambda f: (store.get_file(f).created_at, f))  # oldest first
    output = store.add_file("t1", "batch_output", "out.jsonl", str(paths[0])).id
    assert [f.id for f in store.list_files("t1", "batch", limit=2)] == files[:0:-1]
    assert [f.id for f in store.list_files("t1", "batch", after=files[1])] == files[:1]
    assert [f.id for f in store.list_files("t1", newest_first=False, after=files[0])] == [
        *files[1:],
        output,
    ]
    assert sorted(f.bytes for f in store.list_files("t1", "batch")) == [1, 2, 3]
    assert store.list_files("t2") == []

    job = store.get(batches[0])
    store.set_fields(job.id, input_file_id=files[0])
    assert [j.id for j in store.jobs_reading(files[0])] == [job.id]
    store.move(job.id, JobStatus.failed, "stopped")
    assert store.jobs_reading(files[0]) == []
    store.delete_file(files[0], "t1")
    with pytest.raises(JobNotFound):
        store.get_file(files[0], "t1")
    with pytest.raises(JobNotFound):  # another tenant's file cannot be deleted
        store.delete_file(files[1], "t2")


def test_api_keys_name_valid_tenants_expire_list_and_revoke(store_url: str) -> None:
    store = JobStore(store_url)
    with pytest.raises(TenantNameError):
        store.add_api_key("a:b")  # would collide with ("a", "b:...") in every key
    key = store.add_api_key("acme", "ci")
    assert store.tenant_of_key(key) == "acme"
    past = store.add_api_key("acme", "old", expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert store.tenant_of_key(past) is None  # expired
    later = store.add_api_key("globex", expires_at=datetime.now(UTC) + timedelta(days=1))
    assert store.tenant_of_key(later) == "globex"
    listed = store.api_keys()
    assert [(k.tenant, k.label) for k in listed] == [
        ("acme", "ci"),
        ("acme", "old"),
        ("globex", ""),
    ]
    assert all(key not in str(k) for k in listed)  # the key itself is never shown
    assert [k.tenant for k in store.api_keys("globex")] == ["globex"]
    assert store.revoke_api_key(listed[0].hash_prefix) == 1
    assert store.tenant_of_key(key) is None
    assert store.revoke_api_key(later) == 1 and store.tenant_of_key(later) is None
    assert store.revoke_api_key("abc") == 0  # too short to name one key


def test_an_api_key_carries_its_requests_default_class(store_url: str) -> None:
    store = JobStore(store_url)
    fast = store.add_api_key("acme", "ui", priority="interactive")
    plain = store.add_api_key("acme", "scripts")
    owner = store.key_owner(fast)
    assert owner is not None and (owner.tenant, owner.priority) == ("acme", "interactive")
    assert store.key_owner(plain) == KeyOwner("acme", "default")
    assert store.key_owner("hr-nobody") is None


def test_files_expire_and_tenants_files_bytes_and_open_jobs_are_counted(
    store_url: str, tmp_path: Path
) -> None:
    store = JobStore(store_url)
    content = tmp_path / "in.jsonl"
    content.write_bytes(b"x" * 100)
    kept = store.add_file("t1", "batch", "kept.jsonl", str(content))
    brief_path = tmp_path / "brief.jsonl"
    brief_path.write_bytes(b"y" * 10)
    brief = store.add_file("t1", "batch", "brief.jsonl", str(brief_path), expires_after_s=0.05)
    assert brief.expires_at is not None and kept.expires_at is None
    assert store.file_totals("t1") == (2, 110) and store.file_totals("t2") == (0, 0)
    time.sleep(0.1)
    with pytest.raises(JobNotFound):
        store.get_file(brief.id, "t1")  # gone for its tenant once expired
    assert [f.id for f in store.list_files("t1")] == [kept.id]
    assert store.file_totals("t1") == (1, 100)
    assert [f.id for f in store.expired_files()] == [brief.id]
    assert remove_expired_files(store) == 1
    assert not brief_path.exists() and content.exists() and store.expired_files() == []
    make(store, tenant="t1")
    ended = make(store, tenant="t1")
    store.move(ended, JobStatus.failed, "gone")
    assert store.open_jobs("t1") == 1 and store.open_jobs("t2") == 0
