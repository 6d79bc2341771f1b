"""The dispatcher's view of the model it serves, kept by its shell once a second:

- the stable version and the traffic policy, read from the registry; the core hears of a
  change (``TrafficSeen``);
- the canary judge: with a canary running, what the stable and the canary version did over
  the rules' window (``version_stats``, written by the workers) is judged
  (``headrace.models.canary``) and a step, promotion or rollback is written back to the
  registry as a change of the revision it judged (every dispatcher judges; one write wins);
- the lengths of the rows it batched, saved for the workers' warm-up (``lengths``).

The registry or Redis being away costs a second's judgement, never the dispatch: the last
policy read stands.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime

import redis

from headrace.config.settings import Settings
from headrace.connections import REDIS_ERRORS
from headrace.models.canary import apply, judge, judged_seconds
from headrace.models.catalog import ModelCatalog
from headrace.models.registry import registry
from headrace.models.traffic import TrafficPolicy
from headrace.schemas.errors import UnknownModelError
from headrace.workers.dispatcher.events import SendBatch, TrafficSeen
from headrace.workers.lengths import LengthHistogram
from headrace.workers.version_stats import VersionStats

log = logging.getLogger(__name__)


class ModelWatch:
    def __init__(self, settings: Settings, client: redis.Redis, dispatcher_id: str) -> None:
        self.settings = settings
        self.model = settings.model
        self.actor = f"canary-judge@dispatcher-{dispatcher_id}"
        self.registry = registry(settings)
        self.lengths = LengthHistogram(client, settings.topic_prefix)
        self.stats = VersionStats(client, settings.topic_prefix, settings.model)
        self._seen: tuple[str, int] | None = None  # (stable, revision) the core was told
        self._writer: ModelCatalog | None = None

    def sent(self, action: SendBatch) -> None:
        if not action.shadow:
            self.lengths.add(action.batch.bucket, action.lengths)

    def read(self) -> TrafficSeen | None:
        """The stable version and policy when either changed since the last read (None: no
        change, or the model is not found)."""
        return self._seen_now(*self.registry.catalog.policy(self.model))

    def _seen_now(self, policy: TrafficPolicy | None, revision: int) -> TrafficSeen | None:
        if policy is not None:
            stable = policy.stable
        else:
            try:
                stable = self.registry.spec(self.model).version
            except UnknownModelError:
                return None
        if self._seen == (stable, revision):
            return None
        self._seen = (stable, revision)
        log.info(
            "model %s: stable %s, policy revision %d%s",
            self.model,
            stable,
            revision,
            f": {policy.model_dump_json(exclude_defaults=True)}" if policy else "",
        )
        return TrafficSeen(stable, policy, revision)

    def tick(self) -> list[TrafficSeen]:
        """Once a second: save lengths, judge a canary, read the policy again."""
        try:
            self.lengths.save()
        except REDIS_ERRORS:
            log.debug("request lengths not saved: Redis unreachable")
        try:
            policy, revision = self._judge(*self.registry.catalog.policy(self.model))
            seen = self._seen_now(policy, revision)
        except REDIS_ERRORS:
            log.warning("canary not judged: Redis unreachable")
            return []
        except Exception:  # the registry away: the last policy read stands
            log.warning("traffic policy not read", exc_info=True)
            return []
        return [seen] if seen is not None else []

    def _judge(
        self, policy: TrafficPolicy | None, revision: int
    ) -> tuple[TrafficPolicy | None, int]:
        """Judge a running canary; the policy in force after (the judge's, when it wrote)."""
        if policy is None or policy.canary is None:
            return policy, revision
        now = time.time()
        seconds = judged_seconds(policy.canary, now)
        if not seconds:
            return policy, revision
        stable = self.stats.window(policy.stable, now, seconds)
        trial = self.stats.window(policy.canary.version, now, seconds)
        at = datetime.now(UTC)
        decision, why = judge(policy.canary, stable, trial, at, seconds)
        if decision == "hold":
            return policy, revision
        new = apply(policy, decision, at)
        written = self._write(policy, revision, new, decision, why)
        return (new, written) if written is not None else self.registry.catalog.policy(self.model)

    def _write(
        self, old: TrafficPolicy, revision: int, new: TrafficPolicy, decision: str, why: str
    ) -> int | None:
        """The new revision, or None when another writer changed the policy first."""
        if self._writer is None:
            self._writer = ModelCatalog.for_writing(self.settings.sql_url)
        assert old.canary is not None
        detail = {"reason": why, "canary": old.canary.version, "share": old.canary.share}
        written = self._writer.set_policy(
            self.model,
            new,
            expected_revision=revision,
            action=decision,
            actor=self.actor,
            detail=detail,
        )
        if written is not None:
            log.warning(
                "canary %s of %s: %s (%s); policy revision %d",
                old.canary.version,
                self.model,
                decision,
                why,
                written,
            )
        return written
