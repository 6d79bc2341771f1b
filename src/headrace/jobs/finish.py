"""A job's end, shared by the bulk runner and the single-job runner: its spools delivered and
registered as files of its tenant, then its final status."""

from __future__ import annotations

from pathlib import Path

from headrace.config.settings import Settings
from headrace.jobs.files import deliver
from headrace.jobs.lifecycle import JobStatus
from headrace.jobs.store import JobStore
from headrace.jobs.tables import Job


def end_job(store: JobStore, settings: Settings, job: Job, target: JobStatus) -> Job:
    """Deliver the spools where the job asked, register both as files of the job's tenant
    (``output_file_id``, ``error_file_id``: what the gateway serves; a cancelled or expired
    job's hold the lines answered so far), then move to ``target``."""
    spool_dir = Path(job.spool_dir)
    file_ids = {}
    for name, location, field in (
        ("output.jsonl", job.output_location, "output_file_id"),
        ("errors.jsonl", job.error_location, "error_file_id"),
    ):
        spool = spool_dir / name
        if location and spool.exists():
            deliver(spool, location, settings)
        if spool.exists():
            record = store.add_file(job.tenant, "batch_output", name, str(spool))
            file_ids[field] = record.id
    if file_ids:
        store.set_fields(job.id, **file_ids)
    return store.move(job.id, target)
