"""The model registry in the SQL store: registered versions (each with its manifest), each
model's traffic policy, and the history of policy changes.

Versions are immutable: a (name, version) is registered once, with the sha256 of every file;
registering it again is a ``VersionConflictError``. A policy change is one conditional
UPDATE on the policy's ``revision``, so two writers (an operator and the canary judge of
each dispatcher) never both apply a change to the same revision: the loser sees the new one.

Readers (workers, dispatchers, clients) open the catalog without migrating: a store whose
schema is not there yet holds nothing, and a model with no registered version is looked for
among the built-in ones (``headrace.models.registry``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Integer, String, Text, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm import Mapped, Session, mapped_column

from headrace.models.traffic import TrafficPolicy
from headrace.schemas.errors import VersionConflictError
from headrace.schemas.manifest import ModelManifest, Warmed
from headrace.sql import Base, UTCDateTime, migrate, open_engine


class VersionRow(Base):
    __tablename__ = "model_versions"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    version: Mapped[str] = mapped_column(String(64), primary_key=True)
    task: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(Text)
    backend: Mapped[str] = mapped_column(String(16))
    pooling: Mapped[str] = mapped_column(String(16))
    normalize: Mapped[bool] = mapped_column(Boolean)
    max_tokens: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(Text, default="")
    manifest: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class PolicyRow(Base):
    __tablename__ = "traffic_policies"

    model: Mapped[str] = mapped_column(String(200), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer)
    policy: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class EventRow(Base):
    __tablename__ = "model_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    model: Mapped[str] = mapped_column(String(200))
    revision: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(200))
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(UTCDateTime)


@dataclass(frozen=True)
class RegisteredVersion:
    """One registered version: how to serve it, and its manifest."""

    name: str
    version: str
    task: str
    source: str
    backend: str  # "auto" (the settings decide), "transformers" or "vllm"
    pooling: str  # encoders: "mean" or "cls"
    normalize: bool  # encoders: L2-normalise (a request may still ask for no normalising)
    max_tokens: int
    label: str
    manifest: ModelManifest
    created_at: datetime

    @classmethod
    def of(cls, row: VersionRow) -> RegisteredVersion:
        return cls(
            name=row.name,
            version=row.version,
            task=row.task,
            source=row.source,
            backend=row.backend,
            pooling=row.pooling,
            normalize=row.normalize,
            max_tokens=row.max_tokens,
            label=row.label,
            manifest=ModelManifest.model_validate(row.manifest),
            created_at=row.created_at,
        )


@dataclass(frozen=True)
class PolicyEvent:
    revision: int
    action: str  # deploy, promote, rollback, step (a canary's next share)
    actor: str  # "cli" or the judge's dispatcher
    detail: dict[str, Any]
    at: datetime


_MISSING_SCHEMA = (OperationalError, ProgrammingError)


class ModelCatalog:
    """The registry's rows. Opened for reading, a SQLite file that does not exist yet holds
    nothing until it appears (it is looked for again on each read)."""

    def __init__(self, engine: Engine | None, url: str | None = None) -> None:
        self._engine_ = engine
        self.url = url

    @classmethod
    def for_writing(cls, sql_url: str) -> ModelCatalog:
        engine = open_engine(sql_url)
        assert engine is not None  # created when missing
        migrate(engine)
        return cls(engine, sql_url)

    @classmethod
    def for_reading(cls, sql_url: str) -> ModelCatalog:
        return cls(open_engine(sql_url, create=False), sql_url)

    @property
    def engine(self) -> Engine | None:
        if self._engine_ is None and self.url is not None:
            self._engine_ = open_engine(self.url, create=False)
        return self._engine_

    # --- versions ------------------------------------------------------------------------------
    def add(
        self, manifest: ModelManifest, *, backend: str, pooling: str, normalize: bool
    ) -> RegisteredVersion:
        row = VersionRow(
            name=manifest.name,
            version=manifest.version,
            task=manifest.task,
            source=manifest.source,
            backend=backend,
            pooling=pooling,
            normalize=normalize,
            max_tokens=manifest.max_tokens,
            label=manifest.label,
            manifest=manifest.model_dump(mode="json"),
            created_at=datetime.now(UTC),
        )
        try:
            with Session(self._engine(), expire_on_commit=False) as s, s.begin():
                s.add(row)
        except IntegrityError as exc:
            raise VersionConflictError(
                f"{manifest.name}:{manifest.version} is registered already (versions are "
                "immutable: register the new files under a new version)"
            ) from exc
        return RegisteredVersion.of(row)

    def get(self, name: str, version: str) -> RegisteredVersion | None:
        if self.engine is None:
            return None
        try:
            with Session(self.engine) as s:
                row = s.get(VersionRow, (name, version))
                return RegisteredVersion.of(row) if row is not None else None
        except _MISSING_SCHEMA:
            if self._schema_missing():
                return None
            raise

    def versions(self, name: str | None = None) -> list[RegisteredVersion]:
        """Oldest first."""
        if self.engine is None:
            return []
        query = select(VersionRow).order_by(VersionRow.created_at, VersionRow.version)
        if name is not None:
            query = query.where(VersionRow.name == name)
        try:
            with Session(self.engine) as s:
                return [RegisteredVersion.of(r) for r in s.scalars(query)]
        except _MISSING_SCHEMA:
            if self._schema_missing():
                return []
            raise

    def remove(self, name: str, version: str) -> None:
        policy, _ = self.policy(name)
        if policy is not None and version in policy.versions():
            raise VersionConflictError(
                f"{name}:{version} serves traffic under the current policy; roll it back or "
                "promote another version first"
            )
        with Session(self._engine()) as s, s.begin():
            row = s.get(VersionRow, (name, version))
            if row is None:
                raise LookupError(f"{name}:{version} is not registered")
            s.delete(row)

    def record_warm_up(self, name: str, version: str, warmed: Warmed) -> bool:
        """Keep what the first worker to warm the version up on ``warmed.device`` measured
        (True); a later worker on that device changes nothing (False)."""
        with Session(self._engine()) as s, s.begin():
            row = s.get(VersionRow, (name, version), with_for_update=True)
            if row is None:
                return False
            manifest = ModelManifest.model_validate(row.manifest)
            if warmed.device in manifest.warmed:
                return False
            manifest.warmed[warmed.device] = warmed
            row.manifest = manifest.model_dump(mode="json")
        return True

    def serving_version(self, name: str) -> str | None:
        """The stable version: the policy's, else the first version registered; None when
        the model has no registered version."""
        policy, _ = self.policy(name)
        return policy.stable if policy is not None else self.first_version(name)

    def first_version(self, name: str) -> str | None:
        """The version registered first: stable while the model has no policy."""
        registered = self.versions(name)
        return registered[0].version if registered else None

    # --- the traffic policy -------------------------------------------------------------------
    def policy(self, model: str) -> tuple[TrafficPolicy | None, int]:
        """The model's policy and its revision (None, 0: no policy yet)."""
        if self.engine is None:
            return None, 0
        try:
            with Session(self.engine) as s:
                row = s.get(PolicyRow, model)
                if row is None:
                    return None, 0
                return TrafficPolicy.model_validate(row.policy), row.revision
        except _MISSING_SCHEMA:
            if self._schema_missing():
                return None, 0
            raise

    def set_policy(
        self,
        model: str,
        policy: TrafficPolicy,
        *,
        expected_revision: int,
        action: str,
        actor: str,
        detail: dict[str, Any] | None = None,
    ) -> int | None:
        """Replace the policy if it is still at ``expected_revision`` (0: none yet) and record
        the change; the new revision, or None when another writer changed it first."""
        now = datetime.now(UTC)
        new = expected_revision + 1
        body = policy.model_dump(mode="json")
        try:
            with Session(self._engine()) as s, s.begin():
                if expected_revision == 0:
                    s.add(PolicyRow(model=model, revision=new, policy=body, updated_at=now))
                    s.flush()
                else:
                    result = s.execute(
                        update(PolicyRow)
                        .where(PolicyRow.model == model, PolicyRow.revision == expected_revision)
                        .values(revision=new, policy=body, updated_at=now)
                    )
                    if not result.rowcount:  # type: ignore[attr-defined]
                        return None
                s.add(
                    EventRow(
                        model=model,
                        revision=new,
                        action=action,
                        actor=actor,
                        detail={"policy": body, **(detail or {})},
                        at=now,
                    )
                )
        except IntegrityError:
            return None  # another writer made the first policy
        return new

    def events(self, model: str, limit: int = 20) -> list[PolicyEvent]:
        """Newest first."""
        if self.engine is None:
            return []
        query = (
            select(EventRow)
            .where(EventRow.model == model)
            .order_by(EventRow.id.desc())
            .limit(limit)
        )
        try:
            with Session(self.engine) as s:
                return [
                    PolicyEvent(e.revision, e.action, e.actor, dict(e.detail), e.at)
                    for e in s.scalars(query)
                ]
        except _MISSING_SCHEMA:
            if self._schema_missing():
                return []
            raise

    # --- helpers ------------------------------------------------------------------------------
    def _engine(self) -> Engine:
        if self.engine is None:
            raise RuntimeError("this catalog was opened for reading and holds nothing yet")
        return self.engine

    def _schema_missing(self) -> bool:
        from sqlalchemy import inspect

        assert self.engine is not None
        return not inspect(self.engine).has_table(VersionRow.__tablename__)
