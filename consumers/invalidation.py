"""The invalidation consumer: turns events on upstream topics (through the tag rules in
settings) and explicit records on ``<prefix>.invalidate`` into cache invalidations, applied
to L2 and L3 and broadcast to every process's L1. It also archives idle sessions to S3 on a
schedule (``archive_sessions``).

Partitions are assigned, not balanced in a consumer group (tansu's group rebalancing is
unreliable, see README), and offsets are committed under one group id after the records
before them were applied. Applying is idempotent, so a record applied twice after a crash
costs nothing but a few cache misses. An event no rule can read is counted and skipped.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter

from prometheus_client import Counter as PromCounter
from prometheus_client import Gauge, Histogram
from pydantic import ValidationError

from headrace.cache.keys import model_scope, tag_scope, tenant_scope
from headrace.cache.store import TieredCache, open_cache
from headrace.config.settings import Settings
from headrace.config.tag_rules import RuleMismatch, TagRule
from headrace.connections import REDIS_ERRORS, S3Unavailable
from headrace.health.ready import announce_ready
from headrace.schemas.cache import Invalidation
from headrace.schemas.signing import KeyFolder, invalidation_signature, signed_by
from headrace.schemas.topics import Topics
from headrace.sessions.store import SessionStore, open_sessions
from headrace.transport import Partition, Record, Transport, open_transport

log = logging.getLogger(__name__)

APPLIED = PromCounter(
    "headrace_cache_invalidations_total", "Invalidation records applied", ["source"]
)
SKIPPED = PromCounter(
    "headrace_cache_invalidations_skipped_total", "Records no rule could read", ["reason"]
)
ARCHIVED = PromCounter("headrace_sessions_archived_total", "Idle sessions moved to S3")
PROPAGATION = Histogram(
    "headrace_cache_invalidation_propagation_seconds",
    "From an invalidating record's timestamp to its eviction from every tier",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
LAG = Gauge("headrace_cache_invalidation_lag_records", "Records not yet applied", ["topic"])
RETRY_S = 0.5


class Invalidator:
    def __init__(
        self,
        settings: Settings,
        cache: TieredCache | None = None,
        transport: Transport | None = None,
        sessions: SessionStore | None = None,
    ) -> None:
        self.settings = settings
        self.cache = cache or open_cache(settings, l1=False)
        # the session archiver rides along: idle sessions move from Redis to S3
        self.sessions = sessions or open_sessions(settings)
        self._archived_at = time.monotonic()
        self.topic = Topics(settings.topic_prefix).invalidate
        # a tenant with a key: its explicit invalidations count only when signed by it
        self.key_folder = KeyFolder(settings.tenant_keys_dir)  # read again when it changes
        self.rules: dict[str, list[TagRule]] = {}
        for rule in settings.cache_tag_rules:
            self.rules.setdefault(rule.topic, []).append(rule)
        topics = [self.topic, *self.rules]
        transport = transport or open_transport(settings)
        transport.ensure_topics(topics, partitions=1)
        # never skip an invalidation: a partition without a committed offset starts at 0
        self._reader = transport.reader(f"{settings.topic_prefix}.invalidator", reset="beginning")
        self._partitions = self._reader.assign(topics, start="committed")
        self.counts: Counter[str] = Counter()

    def run(self, stop: threading.Event) -> None:
        log.info("invalidator reading %s", sorted({p[0] for p in self._partitions}))
        announce_ready("invalidator")
        try:
            while not stop.is_set():
                self.step()
                self.archive_sessions()
        finally:
            self._reader.close()

    def step(self, timeout_ms: int = 100) -> int:
        """Apply what arrived; returns how many records were applied."""
        self._reader.expect(awaited=False)  # tansu: fetches wait kafka_fetch_wait_idle_ms
        polled = self._reader.poll(timeout_ms=timeout_ms)
        applied = 0
        for partition, records in polled.items():
            for i, record in enumerate(records):
                try:
                    self._apply(record)
                except REDIS_ERRORS as exc:  # the generations live there: wait for it
                    log.warning("Redis unreachable (%s); invalidation waits", exc)
                    self._reader.seek(partition, record.offset)
                    self._commit({partition: record.offset})
                    time.sleep(RETRY_S)
                    break
                applied += 1
                if record.timestamp_ms is not None:
                    PROPAGATION.observe(max(0.0, time.time() - record.timestamp_ms / 1000))
                if i == len(records) - 1:
                    self._commit({partition: record.offset + 1})
        for partition in self._partitions:
            high, position = self._reader.highwater(partition), self._reader.position(partition)
            if high is not None and position is not None:
                LAG.labels(partition[0]).set(max(0, high - position))
        return applied

    def archive_sessions(self, force: bool = False) -> int:
        """Every ``session_archive_every_s``: sessions idle for ``session_idle_s`` go to S3
        (Redis or S3 away: tried again next time). Returns how many moved."""
        now = time.monotonic()
        if not force and now - self._archived_at < self.settings.session_archive_every_s:
            return 0
        self._archived_at = now
        try:
            moved = self.sessions.archive_idle(self.settings.session_idle_s)
        except (*REDIS_ERRORS, S3Unavailable) as exc:
            log.warning("archiving idle sessions failed (%s); trying again later", exc)
            return 0
        if moved:
            self.counts["sessions_archived"] += moved
            ARCHIVED.inc(moved)
        return moved

    def _apply(self, record: Record) -> None:
        if record.topic == self.topic:
            try:
                request = Invalidation.model_validate_json(record.value)
            except ValidationError as exc:
                self._skip("invalid_record", record, str(exc))
                return
            self.key_folder.refresh()
            signed = signed_by(
                self.key_folder.keys,
                request.tenant,
                request.signature,
                lambda key: invalidation_signature(key, request.signable()),
            )
            if not signed:
                self._skip("unauthenticated", record, f"not signed by {request.tenant}")
                return
            scopes = _scopes(request)
            self.cache.invalidate(scopes, request.keys if request.tenant else [])
            self._applied("explicit")
            return
        try:
            event = json.loads(record.value)
        except (ValueError, TypeError) as exc:
            self._skip("invalid_json", record, str(exc))
            return
        scopes = []
        for rule in self.rules.get(record.topic, []):
            try:
                tenant, tag = rule.apply(event)
            except RuleMismatch as exc:
                self._skip("rule_mismatch", record, str(exc))
                continue
            scopes.append(tag_scope(tenant, tag))
        if scopes:
            self.cache.invalidate(scopes)
            self._applied(record.topic)

    def _applied(self, source: str) -> None:
        APPLIED.labels(source).inc()
        self.counts["applied"] += 1
        self.cache.l2.count("invalidations_applied")

    def _skip(self, reason: str, record: Record, why: str) -> None:
        SKIPPED.labels(reason).inc()
        self.counts[reason] += 1
        log.warning("%s@%d skipped (%s): %s", record.topic, record.offset, reason, why[:200])

    def _commit(self, offsets: dict[Partition, int]) -> None:
        self._reader.commit(offsets, sync=False)


def _scopes(request: Invalidation) -> list[str]:
    scopes: list[str] = []
    if request.tenant is not None:
        scopes += [tag_scope(request.tenant, tag) for tag in request.tags]
        if request.all_of_tenant:
            scopes.append(tenant_scope(request.tenant))
    if request.model is not None and request.model_version is not None:
        scopes.append(model_scope(request.model, request.model_version))
    return scopes
