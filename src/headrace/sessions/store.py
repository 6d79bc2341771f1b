"""Session history in three tiers, with a version per session and compare-and-set writes.

- **L1**: this process's copy of each session it read, used only while its version is still
  Redis's (one ``HGET`` checks it), so another process's write is never hidden. Bounded in
  bytes (least recently used out first).
- **Redis** (``<prefix>:session:<tenant>:<id>``, a hash of ``version`` and ``body``): the
  live copy. Writes are a Lua compare-and-set on ``version``.
- **S3** (``<prefix>/sessions/<tenant>/<id>.json.zst``, zstd JSON): a session idle for
  ``idle_s`` is archived there and removed from Redis (only if it did not change meanwhile);
  reading it brings it back to Redis at the same version. The invalidator runs
  ``archive_idle`` every ``session_archive_every_s``.

**Conflict policy.** A write names the version it was based on. ``append`` (new turns) never
loses a write: on a conflict it re-reads the latest version and adds the turns that are not
there yet (turn ids make this idempotent), so concurrent appends all land, in the order they
won. ``replace`` (rewriting history: edits, truncation) is strict: a conflict raises
``SessionConflict`` with the current version, and the caller decides.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

import redis
from cachetools import LRUCache
from pydantic import BaseModel, Field

from headrace import connections
from headrace.config.settings import Settings
from headrace.connections import ZstdObjects
from headrace.schemas.messages import Identifier

APPEND_RETRIES = 16

# KEYS[1] session; ARGV[1] expected version, ARGV[2] body, ARGV[3] ttl ms.
# Returns the new version, or -(current + 1) on a conflict.
_CAS_SET = """
local current = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if current ~= tonumber(ARGV[1]) then return -(current + 1) end
redis.call('HSET', KEYS[1], 'version', current + 1, 'body', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return current + 1
"""
# Bring an archived session back: only if Redis has none. Returns the version Redis holds.
_RESTORE = """
local current = redis.call('HGET', KEYS[1], 'version')
if current then return tonumber(current) end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'body', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return tonumber(ARGV[1])
"""
# Remove an archived session from Redis only if it is still the archived version.
_DELETE_IF = """
if redis.call('HGET', KEYS[1], 'version') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


class Turn(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str
    turn_id: str = Field(default_factory=lambda: uuid.uuid4().hex)


class Session(BaseModel):
    tenant: Identifier
    session_id: Identifier
    version: int = 0  # 0: no write yet
    turns: list[Turn] = Field(default_factory=list)
    updated_at: float = 0.0  # unix seconds of the last write


class SessionConflict(RuntimeError):
    def __init__(self, session: Session, expected: int) -> None:
        super().__init__(
            f"session {session.tenant}/{session.session_id} is at version {session.version}, "
            f"not {expected}"
        )
        self.current = session


class SessionStore:
    def __init__(
        self,
        client: redis.Redis,
        s3: Any,
        bucket: str,
        prefix: str,
        *,
        ttl_s: float = 7 * 24 * 3600,
        clock: Callable[[], float] = time.time,
        l1_max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        self.redis = client
        self.archive = ZstdObjects(s3, bucket)
        self.prefix = prefix
        self.ttl_ms = int(ttl_s * 1000)
        self.clock = clock
        self.l1: LRUCache[tuple[str, str], Session] = LRUCache(
            maxsize=l1_max_bytes, getsizeof=_size
        )
        self.stats = {"l1": 0, "redis": 0, "s3": 0, "conflicts": 0}
        self._cas = self.redis.register_script(_CAS_SET)
        self._restore = self.redis.register_script(_RESTORE)
        self._delete_if = self.redis.register_script(_DELETE_IF)

    def _key(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}:session:{tenant}:{session_id}"

    def _object(self, tenant: str, session_id: str) -> str:
        return f"{self.prefix}/sessions/{tenant}/{session_id}.json.zst"

    # --- reads ----------------------------------------------------------------------------
    def get(self, tenant: str, session_id: str) -> Session:
        """The latest version (version 0 and no turns for a session never written)."""
        key = self._key(tenant, session_id)
        cached = self.l1.get((tenant, session_id))
        version = self.redis.hget(key, "version")
        if version is not None and cached is not None and int(version) == cached.version:
            self.stats["l1"] += 1
            return cached.model_copy(deep=True)
        body = self.redis.hget(key, "body") if version is not None else None
        if body is not None:
            self.stats["redis"] += 1
            session = Session.model_validate_json(body)
        else:
            session = self._from_archive(tenant, session_id)
        self._remember(session)
        return session.model_copy(deep=True)

    def _from_archive(self, tenant: str, session_id: str) -> Session:
        raw = self.archive.get(self._object(tenant, session_id))
        if raw is None:
            return Session(tenant=tenant, session_id=session_id)
        self.stats["s3"] += 1
        session = Session.model_validate_json(raw)
        held = self._restore(
            keys=[self._key(tenant, session_id)],
            args=[session.version, session.model_dump_json(), self.ttl_ms],
        )
        if int(held) != session.version:  # written meanwhile: Redis's copy is newer
            return self.get(tenant, session_id)
        return session

    # --- writes ---------------------------------------------------------------------------
    def replace(self, session: Session, turns: list[Turn]) -> Session:
        """Set the history to ``turns`` if the session is still at ``session.version``;
        else SessionConflict (with the current session)."""
        new = session.model_copy(
            update={
                "turns": list(turns),
                "updated_at": self.clock(),
                "version": session.version + 1,
            }
        )
        result = int(
            self._cas(
                keys=[self._key(session.tenant, session.session_id)],
                args=[session.version, new.model_dump_json(), self.ttl_ms],
            )
        )
        if result < 0:
            self.stats["conflicts"] += 1
            raise SessionConflict(self.get(session.tenant, session.session_id), session.version)
        self._remember(new)
        return new.model_copy(deep=True)

    def _remember(self, session: Session) -> None:
        key = (session.tenant, session.session_id)
        if _size(session) > self.l1.maxsize:  # larger than the whole L1: not kept
            self.l1.pop(key, None)
            return
        self.l1[key] = session

    def append(self, session: Session, turns: list[Turn]) -> Session:
        """Add ``turns`` after ``session``'s history. On a conflict the latest version is
        read and the turns it lacks are added to it: no append is lost, none lands twice."""
        base = session
        for _ in range(APPEND_RETRIES):
            have = {t.turn_id for t in base.turns}
            missing = [t for t in turns if t.turn_id not in have]
            if not missing:
                return base
            try:
                return self.replace(base, base.turns + missing)
            except SessionConflict as conflict:
                base = conflict.current
        raise RuntimeError(f"session {session.session_id}: {APPEND_RETRIES} conflicts in a row")

    # --- archiving ------------------------------------------------------------------------
    def archive_idle(self, idle_s: float) -> int:
        """Move sessions not written for ``idle_s`` to S3; returns how many moved."""
        moved = 0
        now = self.clock()
        for key in self.redis.scan_iter(match=f"{self.prefix}:session:*", count=500):
            body = self.redis.hget(key, "body")
            if body is None:
                continue
            session = Session.model_validate_json(body)
            if now - session.updated_at < idle_s:
                continue
            self.archive.put(
                self._object(session.tenant, session.session_id),
                body if isinstance(body, bytes) else body.encode(),
            )
            moved += int(self._delete_if(keys=[key], args=[session.version]))
        return moved


def _size(session: Session) -> int:
    """About what a session holds in memory: its text (turns dominate)."""
    return 200 + sum(len(t.content) + 64 for t in session.turns)


def open_sessions(settings: Settings) -> SessionStore:
    """The session store of these settings (Redis, the sessions bucket in S3)."""
    return SessionStore(
        connections.redis_client(settings),
        connections.s3_client(settings),
        settings.sessions_s3_bucket,
        settings.topic_prefix,
        ttl_s=settings.session_ttl_s,
        l1_max_bytes=settings.session_l1_max_bytes,
    )
