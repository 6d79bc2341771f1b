"""The job spool's disk full mid-job (a small tmpfs, filled): the runner stops at once with
the job in progress and says why in its errors (``disk_full``), tries again every
``job_disk_full_retry_s`` and stops again while there is still no room; once there is, the
same runner pool, or the same lone runner (``batch create --wait``, ``batch run``), carries
the job on from its last checkpoint without a restart and ends it with every line answered
once and nothing computed twice."""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from headrace.config.settings import Settings
from headrace.jobs.launch import new_job
from headrace.jobs.lifecycle import JobStatus
from headrace.jobs.pool import RunnerPool
from headrace.jobs.runner import JobRunner, reply_topic
from headrace.jobs.store import JobStore
from headrace.ops.processes import Pipeline
from headrace.schemas.messages import Reply
from tests.disk import fill, small_disk
from tests.eventually import eventually
from tests.integration.topics import read_topic
from tests.jobs.test_runner import answered_lines, job_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

LINES = 1500  # about 8 KB of output each (384 floats): 12 MB in all
RETRY_S = 2.0


def disk_full_stops() -> float:
    return REGISTRY.get_sample_value("headrace_bulk_disk_full_stops_total") or 0.0


@contextlib.contextmanager
def carried(by: str, store: JobStore, job_id: str, settings: Settings) -> Iterator[None]:
    """The job carried out by a runner pool, or by one runner on its own thread."""
    if by == "pool":
        pool = RunnerPool(store, settings).start()
        try:
            yield
        finally:
            pool.close()
        return
    runner = JobRunner(store, job_id, settings)
    thread = threading.Thread(target=runner.run_to_end, daemon=True)
    thread.start()
    try:
        yield
    finally:
        runner.halt.set()
        thread.join(timeout=60)
    assert not thread.is_alive()


@pytest.mark.parametrize("by", ["pool", "lone runner"])
def test_a_full_spool_disk_stops_the_job_until_there_is_room(
    shared_pipeline: Pipeline, shared_prefix: str, tmp_path: Path, by: str
) -> None:
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(f"a line for a disk that fills {i}" for i in range(LINES)) + "\n")
    with small_disk(tmp_path / "disk", 24 << 20) as disk:
        settings = job_settings(shared_prefix, tmp_path).model_copy(
            update={"state_dir": disk / "state", "job_disk_full_retry_s": RETRY_S}
        )
        store = JobStore(settings.sql_url)
        job = new_job(store, settings, str(source), input_format="plain")
        filler = fill(disk, leave_bytes=1 << 20)  # room for about 120 lines
        stops_before = disk_full_stops()
        with carried(by, store, job.id, settings):
            stopped = eventually(
                lambda: (now := store.get(job.id)).errors and now,
                120,
                "the job stopped by the full disk",
            )
            # the fault landed mid-job: lines answered, more to come
            assert stopped.state is JobStatus.in_progress, stopped.status
            written = sum(answered_lines(Path(stopped.spool_dir)).values())
            assert 0 < written < LINES and stopped.completed < LINES, (written, stopped.completed)
            [first] = stopped.errors
            assert first["code"] == "disk_full" and "no space left" in first["message"]
            time.sleep(RETRY_S * 2.5)  # tried again on a disk still full: stopped again
            assert len(store.get(job.id).errors) >= 2
            filler.unlink()
            freed_at = time.monotonic()
            deadline = freed_at + 180
            while (now := store.get(job.id)).state is not JobStatus.completed:
                assert now.state in (JobStatus.in_progress, JobStatus.finalizing), now.status
                assert time.monotonic() < deadline, f"not finished: {now.completed}"
                time.sleep(0.1)
            print(
                f"{by}: disk full after {written} of {LINES} lines, stopped "
                f"{len(now.errors)} times; done {time.monotonic() - freed_at:.1f} s after the "
                "disk had room"
            )
        done = store.get(job.id)
        assert (done.total, done.completed, done.failed) == (LINES, LINES, 0)
        answered = answered_lines(Path(done.spool_dir))
        assert len(answered) == LINES and set(answered.values()) == {1}  # every line once
    assert disk_full_stops() - stops_before >= 2
    replies = collections.Counter(
        Reply.model_validate_json(r.value).request_id
        for r in read_topic(settings, reply_topic(shared_prefix, job.id))
    )
    assert len(replies) == LINES and set(replies.values()) == {1}  # nothing computed twice
