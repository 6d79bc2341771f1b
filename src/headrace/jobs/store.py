"""The durable job store: SQLAlchemy 2.x over a SQLite file (default) or PostgreSQL (by URL).

The schema is versioned with alembic (``headrace.sql``); opening a store brings its
database to the newest revision. Every status change goes through ``move``, which checks the
lifecycle and stamps the matching ``<status>_at`` column.
"""

from __future__ import annotations

import builtins
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from headrace.jobs.api_keys import ApiKeyRows
from headrace.jobs.lifecycle import FINAL, JobStatus, check_move
from headrace.jobs.tables import File, Job, unexpired
from headrace.sql import migrate, open_engine, revision

Owned = TypeVar("Owned", Job, File)


class JobNotFound(LookupError):
    """No job with this id for this tenant (another tenant's job is not found either)."""


@dataclass(frozen=True)
class Counts:
    total: int
    completed: int
    failed: int


def new_job_id() -> str:
    return f"batch_{uuid.uuid4().hex}"


class JobStore(ApiKeyRows):
    def __init__(self, url: str) -> None:
        engine = open_engine(url)
        assert engine is not None  # created when missing
        self.engine: Engine = engine
        migrate(self.engine)

    def revision(self) -> str | None:
        return revision(self.engine)

    # --- jobs ------------------------------------------------------------------------------
    def create(self, **fields: Any) -> Job:
        job = Job(
            id=fields.pop("id", None) or new_job_id(),
            status=JobStatus.validating.value,
            created_at=datetime.now(UTC),
            metadata_=fields.pop("metadata", None) or {},
            errors=[],
            **fields,
        )
        return self._add(job)

    def get(self, job_id: str, tenant: str | None = None) -> Job:
        return self._owned(Job, job_id, tenant)

    def list(
        self,
        tenant: str | None = None,
        limit: int = 20,
        after: str | None = None,
        kind: str | None = None,
    ) -> list[Job]:
        """Newest first; ``after``: the id of the last job of the previous page (a cursor)."""
        query = select(Job).order_by(Job.created_at.desc(), Job.id.desc()).limit(limit)
        if tenant is not None:
            query = query.where(Job.tenant == tenant)
        if kind is not None:
            query = query.where(Job.kind == kind)
        if after is not None:
            query = query.where(_past(Job, self._owned(Job, after, tenant), newest_first=True))
        with Session(self.engine, expire_on_commit=False) as s:
            return list(s.scalars(query))

    def move(self, job_id: str, target: JobStatus, error: str | None = None) -> Job:
        """Change a job's status (lifecycle-checked, under a row lock where the database has
        them) and stamp ``<target>_at``; ``error`` is appended to its errors."""
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            job = s.get(Job, job_id, with_for_update=True)
            if job is None:
                raise JobNotFound(job_id)
            check_move(job.state, target)
            job.status = target.value
            setattr(job, f"{target.value}_at", datetime.now(UTC))
            if error is not None:
                job.errors = [*job.errors, _error_entry(target.value, error)]
        return job

    def add_error(self, job_id: str, code: str, message: str) -> None:
        """Append to a job's errors without moving it (a run stopped for a while)."""
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            job = s.get(Job, job_id, with_for_update=True)
            if job is None:
                raise JobNotFound(job_id)
            job.errors = [*job.errors, _error_entry(code, message)]

    def set_fields(self, job_id: str, **fields: Any) -> None:
        with Session(self.engine) as s, s.begin():
            s.execute(update(Job).where(Job.id == job_id).values(**fields))

    # --- leases: which runner carries a job out ---------------------------------------------
    def claim(self, job_id: str, owner: str, lease_s: float, force: bool = False) -> bool:
        """Take the job's lease for ``owner`` if it is free (never taken, released, or run
        out) or already ``owner``'s (``force``: in any case); one atomic UPDATE, so two
        runners never both win."""
        now = datetime.now(UTC)
        free: ColumnElement[bool] = (
            Job.lease_owner.is_(None) | (Job.lease_expires_at < now) | (Job.lease_owner == owner)
        )
        if force:
            free = Job.id == job_id
        return self._lease_update(job_id, free, owner, now + timedelta(seconds=lease_s))

    def renew(self, job_id: str, owner: str, lease_s: float) -> bool:
        """Extend ``owner``'s lease; False if it is not ``owner``'s any more (it ran out and
        another runner took the job): ``owner`` must stop writing for it."""
        later = datetime.now(UTC) + timedelta(seconds=lease_s)
        return self._lease_update(job_id, Job.lease_owner == owner, owner, later)

    def release(self, job_id: str, owner: str) -> None:
        with Session(self.engine) as s, s.begin():
            s.execute(
                update(Job)
                .where(Job.id == job_id, Job.lease_owner == owner)
                .values(lease_owner=None, lease_expires_at=None)
            )

    def claimable_now(self, job_id: str) -> bool:
        """No runner holds the job's lease (never taken, released, or run out)."""
        job = self.get(job_id)
        expires = job.lease_expires_at
        return job.lease_owner is None or expires is None or expires < datetime.now(UTC)

    def claimable(self, limit: int = 20, kind: str | None = None) -> builtins.list[Job]:
        """Unfinished jobs no runner holds (never taken, or their lease ran out), oldest
        first."""
        now = datetime.now(UTC)
        done = [st.value for st in FINAL]
        query = (
            select(Job)
            .where(
                Job.status.not_in(done),
                Job.lease_owner.is_(None) | (Job.lease_expires_at < now),
            )
            .order_by(Job.created_at.asc(), Job.id.asc())
            .limit(limit)
        )
        if kind is not None:
            query = query.where(Job.kind == kind)
        with Session(self.engine, expire_on_commit=False) as s:
            return list(s.scalars(query))

    def running_by_tenant(self, kind: str | None = None) -> dict[str, int]:
        """Unfinished jobs a runner holds (its lease not run out), per tenant."""
        now = datetime.now(UTC)
        done = [st.value for st in FINAL]
        query = (
            select(Job.tenant, func.count())
            .where(
                Job.status.not_in(done),
                Job.lease_owner.is_not(None),
                Job.lease_expires_at >= now,
            )
            .group_by(Job.tenant)
        )
        if kind is not None:
            query = query.where(Job.kind == kind)
        with Session(self.engine) as s:
            return {tenant: int(count) for tenant, count in s.execute(query)}

    def _lease_update(
        self, job_id: str, condition: ColumnElement[bool], owner: str, until: datetime
    ) -> bool:
        done = [st.value for st in FINAL]
        with Session(self.engine) as s, s.begin():
            result = s.execute(
                update(Job)
                .where(Job.id == job_id, Job.status.not_in(done), condition)
                .values(lease_owner=owner, lease_expires_at=until)
            )
        return bool(result.rowcount)  # type: ignore[attr-defined]

    # --- files -----------------------------------------------------------------------------
    def add_file(
        self,
        tenant: str,
        purpose: str,
        filename: str,
        location: str,
        expires_after_s: float | None = None,
    ) -> File:
        """``expires_after_s``: the file is gone that long after its creation (None: never)."""
        size = Path(location).stat().st_size if not location.startswith("s3://") else 0
        now = datetime.now(UTC)
        record = File(
            id=f"file-{uuid.uuid4().hex}",
            tenant=tenant,
            purpose=purpose,
            filename=filename,
            bytes=size,
            location=location,
            created_at=now,
            expires_at=now + timedelta(seconds=expires_after_s)
            if expires_after_s is not None
            else None,
        )
        return self._add(record)

    def get_file(self, file_id: str, tenant: str | None = None) -> File:
        """Not found once it expired."""
        record = self._owned(File, file_id, tenant)
        if record.expires_at is not None and record.expires_at <= datetime.now(UTC):
            raise JobNotFound(file_id)
        return record

    def file_totals(self, tenant: str) -> tuple[int, int]:
        """(files, bytes) a tenant holds, expired ones left out."""
        query = select(func.count(), func.coalesce(func.sum(File.bytes), 0)).where(
            File.tenant == tenant, unexpired()
        )
        with Session(self.engine) as s:
            count, size = s.execute(query).one()
        return int(count), int(size)

    def expired_files(self, limit: int = 100) -> builtins.list[File]:
        """Files past their expiry, oldest expiry first (for the sweep that removes them)."""
        query = (
            select(File)
            .where(File.expires_at.is_not(None), File.expires_at <= datetime.now(UTC))
            .order_by(File.expires_at.asc())
            .limit(limit)
        )
        with Session(self.engine, expire_on_commit=False) as s:
            return list(s.scalars(query))

    def open_jobs(self, tenant: str) -> int:
        """A tenant's jobs not yet ended (bulk and single)."""
        done = [st.value for st in FINAL]
        query = select(func.count()).where(Job.tenant == tenant, Job.status.not_in(done))
        with Session(self.engine) as s:
            return int(s.execute(query).scalar_one())

    def list_files(
        self,
        tenant: str,
        purpose: str | None = None,
        limit: int = 20,
        after: str | None = None,
        newest_first: bool = True,
    ) -> builtins.list[File]:
        """A tenant's files; ``after``: the id of the last file of the previous page."""
        order = (
            (File.created_at.desc(), File.id.desc())
            if newest_first
            else (
                File.created_at.asc(),
                File.id.asc(),
            )
        )
        query = select(File).where(File.tenant == tenant, unexpired()).order_by(*order).limit(limit)
        if purpose is not None:
            query = query.where(File.purpose == purpose)
        if after is not None:
            query = query.where(_past(File, self._owned(File, after, tenant), newest_first))
        with Session(self.engine, expire_on_commit=False) as s:
            return list(s.scalars(query))

    def delete_file(self, file_id: str, tenant: str | None) -> File:
        """Forget a file (the caller removes its content)."""
        record = self._owned(File, file_id, tenant)
        with Session(self.engine) as s, s.begin():
            row = s.get(File, file_id)
            if row is not None:
                s.delete(row)
        return record

    def jobs_reading(self, file_id: str) -> builtins.list[Job]:
        """The unfinished jobs whose input is this file."""
        done = [st.value for st in FINAL]
        query = select(Job).where(Job.input_file_id == file_id, Job.status.not_in(done))
        with Session(self.engine, expire_on_commit=False) as s:
            return list(s.scalars(query))

    # --- rows of one tenant ------------------------------------------------------------------
    def _add(self, row: Owned) -> Owned:
        with Session(self.engine, expire_on_commit=False) as s, s.begin():
            s.add(row)
        return row

    def _owned(self, model: type[Owned], key: str, tenant: str | None) -> Owned:
        """The row ``key`` of ``model``; not found when it belongs to another tenant."""
        with Session(self.engine, expire_on_commit=False) as s:
            row = s.get(model, key)
        if row is None or (tenant is not None and row.tenant != tenant):
            raise JobNotFound(key)
        return row


def _past(model: type[Owned], cursor: Owned, newest_first: bool) -> ColumnElement[bool]:
    """The rows after ``cursor`` in a page order of (created_at, id)."""
    if newest_first:
        return (model.created_at < cursor.created_at) | (
            (model.created_at == cursor.created_at) & (model.id < cursor.id)
        )
    return (model.created_at > cursor.created_at) | (
        (model.created_at == cursor.created_at) & (model.id > cursor.id)
    )


def _error_entry(code: str, message: str) -> dict[str, Any]:
    """One entry of a job's errors, in OpenAI's batch error shape."""
    return {"code": code, "message": message, "param": None, "line": None}
