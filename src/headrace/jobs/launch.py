"""Registering a bulk job, and starting its runner in a process of its own."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

from headrace.config.settings import Settings
from headrace.jobs.formats import InputFormat
from headrace.jobs.store import JobStore, new_job_id
from headrace.jobs.tables import Job
from headrace.schemas.openai_batch import EMBEDDINGS_URL


def new_job(
    store: JobStore,
    settings: Settings,
    input_location: str,
    *,
    tenant: str = "default",
    model: str | None = None,
    input_format: InputFormat = "openai",
    output_location: str | None = None,
    error_location: str | None = None,
    completion_window_s: float | None = 24 * 3600,
    metadata: dict[str, str] | None = None,
    endpoint: str = EMBEDDINGS_URL,
    kind: str = "batch",
    owner: str | None = None,
) -> Job:
    """Register a job (status validating); ``JobRunner(store, id, settings).run()`` carries it out,
    or any runner pool. ``owner``: the runner that will, holding the lease from the start
    (so no pool takes the job first). Its spools live in ``<shared_dir>/jobs/<id>``, where
    every gateway replica and runner pool reaches them."""
    job_id = new_job_id()
    now = datetime.now(UTC)
    lease = now + timedelta(seconds=settings.job_lease_s) if owner else None
    return store.create(
        id=job_id,
        tenant=tenant,
        endpoint=endpoint,
        model=model or settings.model,
        input_location=input_location,
        input_format=input_format,
        output_location=output_location,
        error_location=error_location,
        spool_dir=str((settings.shared_dir / "jobs" / job_id).resolve()),
        expires_at=now + timedelta(seconds=completion_window_s) if completion_window_s else None,
        metadata=metadata or {},
        kind=kind,
        lease_owner=owner,
        lease_expires_at=lease,
    )


def start_detached(
    settings: Settings,
    job_id: str,
    truncate: bool = False,
    take_over: bool = False,
    owner: str | None = None,
) -> None:
    """Run a job in a process of its own (``headrace batch run``), which outlives its
    starter; its log is ``runner.log`` in the job's folder."""
    log_dir = settings.shared_dir / "jobs" / job_id
    log_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "headrace.ops.cli", "batch", "run", job_id]
    if truncate:
        argv.append("--truncate")
    if take_over:
        argv.append("--take-over")
    if owner:
        argv += ["--owner", owner]
    with open(log_dir / "runner.log", "ab") as log_file:
        subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
